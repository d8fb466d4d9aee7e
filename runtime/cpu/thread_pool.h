// A small fixed-size thread pool for the CPU reference backend's data-parallel loops.
//
// ParallelFor splits [0, n) into contiguous chunks, one per thread, runs the first on the
// calling thread and the rest on the workers, and returns when all are done. Each index is
// processed by exactly one call of `fn`, so results that depend only on the index are
// identical for every thread count. ParallelFor is not reentrant: call it from one thread
// at a time and not from inside `fn`.
#ifndef TILEPLAN_RUNTIME_CPU_THREAD_POOL_H_
#define TILEPLAN_RUNTIME_CPU_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tileplan::runtime::cpu {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread; values below 1 mean 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n).
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // Guarded by mu_: the current job, its generation (bumped per ParallelFor call), the
  // number of chunks still running, and the shutdown flag.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace tileplan::runtime::cpu

#endif  // TILEPLAN_RUNTIME_CPU_THREAD_POOL_H_
