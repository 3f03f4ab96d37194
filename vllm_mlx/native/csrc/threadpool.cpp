#include "threadpool.h"

#include <cstdlib>
#include <mutex>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define VMLX_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define VMLX_PAUSE() asm volatile("yield")
#else
#define VMLX_PAUSE() ((void)0)
#endif

namespace vmlx {

namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return fallback;
  }
  int parsed = std::atoi(value);
  return parsed > 0 ? parsed : fallback;
}

} // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool(env_int(
      "VLLM_MLX_NATIVE_THREADS",
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))));
  return pool;
}

ThreadPool::ThreadPool(int threads)
    // A few µs of pause instructions before sleeping: on a shared 2-core machine a
    // longer spin takes the core from the thread that would produce the next job.
    : spin_iterations_(env_int("VLLM_MLX_NATIVE_SPIN", 300)) {
  for (int i = 1; i < threads; ++i) {
    workers_.emplace_back([this] { worker_loop(); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& worker : workers_) {
    worker.join();
  }
}

void ThreadPool::run_tasks(const std::function<void(int)>& fn, int tasks) {
  for (int i = next_.fetch_add(1); i < tasks; i = next_.fetch_add(1)) {
    fn(i);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == tasks) {
      done_.notify_one();
    }
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = generation_.load();
  while (true) {
    for (int spin = 0; generation_.load(std::memory_order_acquire) == seen &&
         spin < spin_iterations_;
         ++spin) {
      VMLX_PAUSE();
    }
    generation_.wait(seen, std::memory_order_acquire);
    const std::function<void(int)>* job;
    int tasks;
    {
      std::lock_guard<std::mutex> lock(job_mutex_);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load()) {
        return;
      }
      job = job_;
      tasks = tasks_;
      if (job == nullptr) {
        continue; // woke after that job finished: nothing left to help with
      }
      busy_.fetch_add(1, std::memory_order_acq_rel);
    }
    run_tasks(*job, tasks);
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      busy_.notify_one();
    }
  }
}

template <typename Atomic, typename Done>
static void wait_until(Atomic& value, Done done, int spin_iterations) {
  int seen = value.load(std::memory_order_acquire);
  for (int spin = 0; !done(seen) && spin < spin_iterations; ++spin) {
    VMLX_PAUSE();
    seen = value.load(std::memory_order_acquire);
  }
  while (!done(seen)) {
    value.wait(seen, std::memory_order_acquire);
    seen = value.load(std::memory_order_acquire);
  }
}

void ThreadPool::parallel_for(int tasks, const std::function<void(int)>& fn) {
  if (tasks <= 0) {
    return;
  }
  if (workers_.empty() || tasks == 1) {
    for (int i = 0; i < tasks; ++i) {
      fn(i);
    }
    return;
  }
  // Kernels run on MLX's CPU stream thread; a second caller waits its turn.
  static std::mutex one_job_at_a_time;
  std::lock_guard<std::mutex> one(one_job_at_a_time);
  {
    std::lock_guard<std::mutex> lock(job_mutex_);
    job_ = &fn;
    tasks_ = tasks;
    next_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  generation_.notify_all();
  run_tasks(fn, tasks);
  // Wait for the tasks, not for the workers: a worker the OS has not scheduled yet
  // (the machine is shared) must not hold up a step the caller could finish alone.
  wait_until(done_, [tasks](int done) { return done >= tasks; }, spin_iterations_);
  {
    std::lock_guard<std::mutex> lock(job_mutex_);
    job_ = nullptr;
  }
  wait_until(busy_, [](int busy) { return busy == 0; }, spin_iterations_);
}

} // namespace vmlx
