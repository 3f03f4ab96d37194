// A small fork-join pool for the kernels: the calling thread works too, idle workers
// sleep on a futex (std::atomic::wait) after a short bounded spin, so an idle server
// burns no CPU and a busy decode loop does not pay a wake-up per matmul.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vmlx {

class ThreadPool {
 public:
  // The process-wide pool, sized by VLLM_MLX_NATIVE_THREADS or the CPU count.
  static ThreadPool& instance();

  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs fn(0..tasks-1), each index once, spread over the pool; returns when all ran.
  void parallel_for(int tasks, const std::function<void(int)>& fn);

  int size() const {
    return static_cast<int>(workers_.size()) + 1;
  }

 private:
  void worker_loop();
  void run_tasks(const std::function<void(int)>& fn, int tasks);

  std::vector<std::thread> workers_;
  std::mutex job_mutex_; // guards job_ and tasks_ for workers that join late
  const std::function<void(int)>* job_{nullptr};
  int tasks_{0};
  std::atomic<int> next_{0};
  std::atomic<int> done_{0};
  std::atomic<int> busy_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  int spin_iterations_;
};

} // namespace vmlx
