#pragma once
// A fixed set of threads that split one range of work. The caller's thread is thread 0, so one thread means
// no other thread at all. Who computes an item never changes how it is computed: results do not depend on
// the thread count or on which thread took which part.
//
// Work is handed out in chunks to whichever thread is free, and no thread has to take part: the caller
// takes chunks too, and waits only for chunks another thread has begun. The workers run at SCHED_IDLE, on
// cores no other thread wants. Roles placed on one host each run a pool as wide as the host: when one is
// idle the other's workers get its cores; when both compute, each caller keeps a core, the workers yield
// to the other role's caller, and the caller does their share itself.
//
// A model step runs a few hundred short jobs (one per matmul group and attention pass per layer),
// microseconds apart; waking a sleeping thread for each would cost more than many of the jobs. So between
// jobs a worker that took part in the last one spins for a short while (about 100 µs) before it sleeps, as
// ggml's own thread pool does; one that came too late to find any chunk sleeps at once (its core is busy
// with something else), and the caller spins before it waits.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace epd::model {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return threads_; }
  // fn(begin, end, thread) for parts of [0, n) that cover it once, in up to four parts per thread, each run
  // by whichever thread is free (`thread` < size(): for per-thread scratch). Returns when all are done.
  void run(size_t n, const std::function<void(size_t, size_t, unsigned)>& fn);
  // fn(chunk, thread) for every chunk in [0, chunks), handed out one at a time to whichever thread is free.
  // Returns when all are done.
  void run_chunks(size_t chunks, const std::function<void(size_t, unsigned)>& fn);

 private:
  using Chunk = std::function<void(size_t, unsigned)>;
  void dispatch(size_t chunks, const Chunk& chunk);
  // Runs chunks of job `job` (the tag of a job_word_) while it has any left; true if it ran one.
  bool take_chunks(uint64_t job, unsigned t);
  void worker(unsigned t);

  unsigned threads_;
  std::vector<std::thread> workers_;
  // The job: its tag (a count of jobs, in the top bits), its chunks and the next chunk to hand out, in
  // one word, so a chunk is claimed by one compare-and-swap that also checks it is of the job the
  // claimant woke for. A claimed chunk keeps its job (and chunk_) alive until it is done.
  std::atomic<uint64_t> job_word_{0};
  const Chunk* chunk_ = nullptr;
  std::atomic<size_t> done_{0};  // chunks of the current job finished
  std::mutex m_;
  std::condition_variable go_, finished_;
  unsigned sleepers_ = 0;        // workers waiting on go_ (under m_)
  bool caller_waiting_ = false;  // the caller waits on finished_ (under m_)
  std::atomic<bool> stop_{false};
};

}  // namespace epd::model
