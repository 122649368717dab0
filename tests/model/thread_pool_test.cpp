// The compute thread pool (model/src/kernels/thread_pool.hpp): every part of a job is run exactly once by
// one of the pool's threads, and a worker that comes late never touches a job its caller has left, even
// when other busy threads keep the pool's workers off the cores.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/thread_pool.hpp"

using epd::model::ThreadPool;

namespace thread_pool_test {

// Threads that keep every core busy while they live: the pool's workers then run late or not at all.
struct Hogs {
  explicit Hogs(unsigned n) {
    for (unsigned i = 0; i < n; ++i)
      threads.emplace_back([this] {
        while (!stop.load(std::memory_order_relaxed)) {
        }
      });
  }
  ~Hogs() {
    stop = true;
    for (auto& t : threads) t.join();
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
};

// Runs `jobs` jobs of every size up to 40 on `pool`; each job's counts live on the heap only while it runs
// (ASan: a late worker writing into them is a use after free). Returns the jobs where some item was not
// run exactly once or by a thread outside the pool.
int wrong_jobs(ThreadPool& pool, int jobs) {
  int wrong = 0;
  for (int j = 0; j < jobs; ++j) {
    const size_t n = size_t(j % 41);
    auto counts = std::make_unique<std::atomic<int>[]>(n + 1);
    std::atomic<int> bad_thread{0};
    if (j % 2)
      pool.run_chunks(n, [&](size_t c, unsigned t) {
        counts[c].fetch_add(1);
        if (t >= pool.size()) ++bad_thread;
      });
    else
      pool.run(n, [&](size_t b, size_t e, unsigned t) {
        for (size_t i = b; i < e; ++i) counts[i].fetch_add(1);
        if (t >= pool.size() || b > e || e > n) ++bad_thread;
      });
    bool ok = bad_thread == 0;
    for (size_t i = 0; i < n; ++i) ok = ok && counts[i].load() == 1;
    wrong += !ok;
  }
  return wrong;
}

}  // namespace thread_pool_test

using namespace thread_pool_test;

TEST_CASE("thread pool: every chunk and every part of a range is run once, by one of the pool's threads",
          "[model][threads]") {
  for (unsigned threads : {1u, 2u, 3u, 8u}) {
    INFO(threads << " threads");
    ThreadPool pool(threads);
    CHECK(wrong_jobs(pool, 4000) == 0);
  }
}

TEST_CASE(
    "thread pool: with every core taken by other threads, jobs still finish and late workers touch none",
    "[model][threads]") {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  ThreadPool pool(cores + 1);  // more threads than cores, as roles sharing a host have
  Hogs hogs(cores);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(wrong_jobs(pool, 20000) == 0);
  std::printf("thread pool: 20000 jobs beside %u busy threads in %.0f ms\n", cores,
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}
