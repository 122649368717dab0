// A target that dies (SIGKILL) or stalls (SIGSTOP) mid-transfer: outstanding batches fail with a retryable
// error within the configured bound, and nothing hangs.
#include <signal.h>

#include <catch2/catch.hpp>
#include <deque>
#include <thread>

#include "test_util.hpp"

using namespace epd::test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kMiB = 1ull << 20;

bool retryable_loss(const Status& st) {
  if (st.ok()) return false;
  const ErrorCode c = st.error().code;
  return st.error().retryable && (c == ErrorCode::peer_died || c == ErrorCode::timeout);
}

// Keeps `window` batches of 16 MiB in flight; `signal` hits the child once the first one completed. Returns
// the first failure; every batch must finish within `bound` of the signal.
Status stream_until_failure(const std::string& kind, int signal, std::chrono::milliseconds op_timeout,
                            size_t window) {
  ChildTarget target(kind, 1, 64 * kMiB);
  REQUIRE(target.ok());
  EngineConfig c;
  c.options.set("tcp_op_timeout_ms", int64_t(op_timeout.count()));
  c.options.set("rdma_op_timeout_ms", int64_t(op_timeout.count()));
  auto init = make_initiator(kind, 16 * kMiB, c);
  REQUIRE(init.engine);
  auto s = init.engine->open_session(target.descriptor());
  REQUIRE(s);
  std::deque<BatchPtr> inflight;
  uint64_t n = 0;
  auto submit_one = [&] {
    const uint64_t dst = target.region(0).base + (n++ % 4) * 16 * kMiB;
    auto b = (*s)->submit({WriteOp{init.src.addr(), dst, 16 * kMiB}});
    REQUIRE(b);  // validation passes; transfer errors arrive through the batch
    inflight.push_back(*b);
  };
  for (size_t i = 0; i < window; ++i) submit_one();
  REQUIRE(inflight.front()->wait(30s));
  REQUIRE(inflight.front()->status().ok());
  inflight.pop_front();
  ::kill(target.process().pid(), signal);
  const auto signalled = std::chrono::steady_clock::now();
  const auto bound = op_timeout + 10s;  // generous: no timing assertion, only "no hang"
  Status first_failure;
  bool failed = false;
  while (!failed) {
    REQUIRE(std::chrono::steady_clock::now() - signalled < bound);
    submit_one();
    auto b = inflight.front();
    inflight.pop_front();
    REQUIRE(b->wait(std::chrono::duration_cast<std::chrono::milliseconds>(bound)));
    if (!b->status().ok()) {
      first_failure = b->status();
      failed = true;
    }
  }
  for (auto& b : inflight) {
    REQUIRE(b->wait(std::chrono::duration_cast<std::chrono::milliseconds>(bound)));
    if (!b->status().ok()) CHECK(b->status().error().retryable);
  }
  CHECK_FALSE((*s)->healthy());
  // A broken session fails new batches at once, still retryable.
  auto late = (*s)->submit({WriteOp{init.src.addr(), target.region(0).base, 4096}});
  REQUIRE(late);
  REQUIRE((*late)->wait(5s));
  CHECK_FALSE((*late)->status().ok());
  CHECK((*late)->status().error().retryable);
  return first_failure;
}

}  // namespace

TEST_CASE("tcp: target killed mid-transfer fails batches, retryable", "[peer_death][tcp][multiproc]") {
  const Status st = stream_until_failure("tcp", SIGKILL, 5000ms, 8);
  CHECK(retryable_loss(st));
  INFO(st.error().to_string());
  CHECK(st.error().code == ErrorCode::peer_died);
}

TEST_CASE("tcp: stalled target times out, retryable", "[peer_death][tcp][multiproc]") {
  // 2 s without progress: short enough to keep the test quick, long enough that a loaded CI machine does not
  // time out the healthy batches before the target is stopped.
  const Status st = stream_until_failure("tcp", SIGSTOP, 2000ms, 4);
  CHECK(retryable_loss(st));
  CHECK(st.error().code == ErrorCode::timeout);
}

TEST_CASE("shm: target killed fails the next batches, retryable", "[peer_death][shm][multiproc]") {
  const Status st = stream_until_failure("shm", SIGKILL, 5000ms, 2);
  CHECK(retryable_loss(st));
  CHECK(st.error().code == ErrorCode::peer_died);
}

// (No SIGSTOP case for rdma: the target's device, not its process, places the bytes, so a stopped target
// still completes writes.)
TEST_CASE("rdma: target killed mid-transfer fails batches, retryable",
          "[peer_death][rdma][verbs][multiproc]") {
  const Status st = stream_until_failure("rdma", SIGKILL, 5000ms, 8);
  CHECK(retryable_loss(st));
  INFO(st.error().to_string());
  CHECK(st.error().code == ErrorCode::peer_died);
}
