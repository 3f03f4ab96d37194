// A small fork-join pool for the kernels: the calling thread works too, idle workers
// sleep on a futex (std::atomic::wait) after a short bounded spin, so an idle server
// burns no CPU and a busy decode loop does not pay a wake-up per matmul.
//
// Placement: each worker keeps to a CPU of its own, off the caller's. Left to itself the
// kernel here (a 2-vCPU guest) woke the worker onto the caller's CPU and left it queued
// there behind the caller, the other CPU idle: one core's speed with two threads. When
// the other CPU is busy with another process, a worker there gets a fraction of it and
// holds jobs up (the caller waits for a task it was descheduled in): two threads then
// do worse than one. So under "auto" the caller times its jobs over windows, now and then
// runs one window the other way (alone, or with the workers), and keeps the faster.
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

  // Placement: "apart" (each worker on its own CPU off the caller's, always), "kernel"
  // (the kernel's), or "auto" (apart while it pays, else the caller alone; the default;
  // VLLM_MLX_NATIVE_PIN=0 starts with "kernel", =1 with "apart"). False for another name.
  bool set_placement(const char* name);
  const char* placement() const;
  // Whether the workers run apart now (under "auto": false while the caller runs alone).
  bool apart_now() const {
    return apart_now_.load(std::memory_order_relaxed);
  }

 private:
  enum class Placement { kernel, apart, automatic };

  void worker_loop(int index, uint32_t seen);
  // Claims and runs tasks of job `job_id` until none is left; returns how many it ran.
  int run_tasks(const std::function<void(int)>* fn, uint32_t job_id, int tasks);
  // The CPU worker `index` runs on for a caller on caller_cpu (-1: any allowed).
  int cpu_for(int caller_cpu, int index) const;
  // Under "auto": account one job's wall time; at the end of a window, choose whether
  // the next runs with the workers or alone.
  void account(int64_t job_ns);

  std::vector<std::thread> workers_;
  std::mutex job_mutex_; // guards job_, tasks_, job_id_ and caller_cpu_ for late workers
  const std::function<void(int)>* job_{nullptr};
  int tasks_{0};
  uint32_t job_id_{0};
  int caller_cpu_{-1}; // the CPU the current job's caller ran on
  // (job id << 32) | next task index: a worker late for a finished job cannot claim a
  // task of the next one, so the caller never waits for workers, only for tasks.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<Placement> placement_{Placement::automatic};
  std::atomic<bool> apart_now_{true};
  std::vector<int> cpus_; // the CPUs this process may run on, at start
  int spin_iterations_;
  // "auto"'s windows (the caller's, under the one-job-at-a-time lock)
  int64_t window_ns_{0};
  int window_jobs_{0};
  int64_t last_ns_[2]{0, 0}; // the last window's job time alone [0] and with workers [1]
  bool trying_{false}; // this window runs the other way, to compare
  int until_try_{2}; // windows before the next such trial
  int period_{8}; // windows between trials (kFirstPeriod): grows while trials lose
};

} // namespace vmlx
