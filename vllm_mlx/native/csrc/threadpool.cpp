#include "threadpool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

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

// Runs this thread on `cpu` only, or on any of `cpus` when cpu < 0.
void run_on(int cpu, const std::vector<int>& cpus) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpu >= 0) {
    CPU_SET(cpu, &set);
  } else {
    for (int c : cpus) {
      CPU_SET(c, &set);
    }
  }
  sched_setaffinity(0, sizeof(set), &set); // best effort: a refusal leaves the kernel's choice
#else
  (void)cpu;
  (void)cpus;
#endif
}

int current_cpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// "auto": jobs per window (a decode step of the default model runs ~150), the fewest and
// most windows between two trials of the other way, and the margin a trial must win by
constexpr int kWindowJobs = 512;
constexpr int kFirstPeriod = 8;
constexpr int kLastPeriod = 64;
constexpr double kTrialMargin = 0.95;

} // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool(env_int(
      "VLLM_MLX_NATIVE_THREADS",
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))));
  return pool;
}

ThreadPool::ThreadPool(int threads)
    // ≈50 µs of pause instructions (25 ns each on a Zen 4 guest, ≈40 on Sapphire
    // Rapids) before sleeping: between a decode step's jobs the caller's own work (norms,
    // RoPE, rounding x) runs 5-30 µs with 8 rows, and a worker asleep by then wakes
    // through the futex late for the next job (300 pauses: 8 streams 7-12% slower).
    : spin_iterations_(env_int("VLLM_MLX_NATIVE_SPIN", 2000)) {
  const char* pin = std::getenv("VLLM_MLX_NATIVE_PIN");
  set_placement(pin == nullptr || *pin == '\0' ? "auto" : std::strcmp(pin, "0") == 0 ? "kernel" : "apart");
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) {
        cpus_.push_back(c);
      }
    }
  }
#endif
  // the generation as the workers start from, read before any starts: a pool destroyed
  // before a worker ran would otherwise leave it waiting for a generation already passed
  const uint32_t start = generation_.load();
  for (int i = 1; i < threads; ++i) {
    workers_.emplace_back([this, i, start] { worker_loop(i, start); });
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

bool ThreadPool::set_placement(const char* name) {
  const std::string wanted(name);
  if (wanted != "kernel" && wanted != "apart" && wanted != "auto") {
    return false;
  }
  placement_.store(wanted == "kernel" ? Placement::kernel : wanted == "apart" ? Placement::apart : Placement::automatic);
  apart_now_.store(wanted != "kernel");
  return true;
}

const char* ThreadPool::placement() const {
  switch (placement_.load()) {
    case Placement::kernel:
      return "kernel";
    case Placement::apart:
      return "apart";
    default:
      return "auto";
  }
}

int ThreadPool::cpu_for(int caller_cpu, int index) const {
  const int n = static_cast<int>(cpus_.size());
  if (caller_cpu < 0 || n < 2) {
    return -1;
  }
  const int at = static_cast<int>(std::find(cpus_.begin(), cpus_.end(), caller_cpu) - cpus_.begin());
  return cpus_[(at % n + index) % n];
}

int ThreadPool::run_tasks(const std::function<void(int)>* fn, uint32_t job_id, int tasks) {
  int ran = 0;
  uint64_t claim = claim_.load(std::memory_order_acquire);
  while (static_cast<uint32_t>(claim >> 32) == job_id && static_cast<int>(claim & 0xffffffffu) < tasks) {
    if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) {
      continue; // another thread took it (claim now holds the current value)
    }
    (*fn)(static_cast<int>(claim & 0xffffffffu)); // live: a task of its job is unfinished
    ++ran;
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == tasks) {
      done_.notify_one();
    }
    claim = claim_.load(std::memory_order_acquire);
  }
  return ran;
}

void ThreadPool::worker_loop(int index, uint32_t seen) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), "vmlx-pool"); // told apart from MLX's in perf and top
#endif
  int placed = -2; // the CPU this worker was last put on (-1: any allowed)
  while (true) {
    for (int spin = 0; generation_.load(std::memory_order_acquire) == seen && spin < spin_iterations_; ++spin) {
      VMLX_PAUSE();
    }
    generation_.wait(seen, std::memory_order_acquire);
    const std::function<void(int)>* job;
    int tasks, cpu;
    uint32_t job_id;
    {
      std::lock_guard<std::mutex> lock(job_mutex_);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load()) {
        return;
      }
      job = job_;
      tasks = tasks_;
      job_id = job_id_;
      cpu = apart_now_.load(std::memory_order_relaxed) ? cpu_for(caller_cpu_, index) : -1;
    }
    if (job == nullptr) {
      continue; // woke after that job finished: nothing left to help with
    }
    if (cpu != placed) { // a syscall only when the caller moved or the placement changed
      run_on(cpu, cpus_);
      placed = cpu;
    }
    run_tasks(job, job_id, tasks); // claims nothing once the job is over: job is not read
  }
}

void ThreadPool::account(int64_t job_ns) {
  window_ns_ += job_ns;
  if (++window_jobs_ < kWindowJobs) {
    return;
  }
  const int way = apart_now_.load(std::memory_order_relaxed) ? 1 : 0;
  last_ns_[way] = window_ns_;
  window_ns_ = 0;
  window_jobs_ = 0;
  bool next = way == 1;
  if (trying_) { // keep the way just tried if it beat the window before it
    trying_ = false;
    if (last_ns_[way] < kTrialMargin * static_cast<double>(last_ns_[1 - way])) {
      period_ = kFirstPeriod;
    } else {
      next = !next;
      period_ = std::min(2 * period_, kLastPeriod);
    }
    until_try_ = period_;
  } else if (--until_try_ <= 0) {
    trying_ = true;
    next = !next;
  }
  apart_now_.store(next, std::memory_order_relaxed);
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
  const bool watch = placement_.load(std::memory_order_relaxed) == Placement::automatic;
  if (watch && !apart_now_.load(std::memory_order_relaxed)) {
    const int64_t start = now_ns();
    for (int i = 0; i < tasks; ++i) { // the workers' CPUs are taken: alone was faster
      fn(i);
    }
    account(now_ns() - start);
    return;
  }
  uint32_t job_id;
  {
    std::lock_guard<std::mutex> lock(job_mutex_);
    job_id = ++job_id_;
    job_ = &fn;
    tasks_ = tasks;
    caller_cpu_ = current_cpu();
    done_.store(0, std::memory_order_relaxed);
    claim_.store(static_cast<uint64_t>(job_id) << 32, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  generation_.notify_all();
  const int64_t start = watch ? now_ns() : 0;
  run_tasks(&fn, job_id, tasks);
  // Wait for the tasks, not for the workers: a worker the OS has not scheduled yet
  // (the machine is shared) must not hold up a step the caller could finish alone.
  wait_until(done_, [tasks](int done) { return done >= tasks; }, spin_iterations_);
  {
    std::lock_guard<std::mutex> lock(job_mutex_);
    job_ = nullptr;
  }
  if (watch) {
    account(now_ns() - start);
  }
}

} // namespace vmlx
