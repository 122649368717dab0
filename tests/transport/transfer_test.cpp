// Bytes arrive intact: single writes from 1 B to 64 MiB and hundreds of batches in flight with random offsets
// and sizes, on every registered backend, with the target in this process and in a child process; and tcp
// writes cut short by a full socket.
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace epd::test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kMiB = 1ull << 20;

void single_writes_of_every_size(bool child, const std::string& kind) {
  auto target = make_target(child, kind, 2, 64 * kMiB + 4096);
  REQUIRE(target->ok());
  auto init = make_initiator(kind, 64 * kMiB + 4096);
  REQUIRE(init.engine);
  auto session = init.engine->open_session(target->descriptor());
  REQUIRE(session);
  CHECK((*session)->backend() == kind);

  const std::vector<uint64_t> sizes = {1, 7, 4096, 65536 + 3, kMiB, 16 * kMiB + 5, 64 * kMiB};
  uint64_t seed = 1;
  for (uint64_t size : sizes) {
    CAPTURE(size);
    const uint64_t src_off = 13, dst_off = 1 + seed;  // odd, unaligned offsets
    uint8_t* src = init.src.base + src_off;
    fill_random(src, size, seed);
    const uint64_t dst = target->region(seed % 2).base + dst_off;
    auto batch = (*session)->submit({WriteOp{reinterpret_cast<uint64_t>(src), dst, size}});
    REQUIRE(batch);
    REQUIRE((*batch)->wait(30s));
    REQUIRE((*batch)->status().ok());
    CHECK(target->checksum(dst, size) == xxh(src, size));
    ++seed;
  }
  CHECK((*session)->stats().batches_ok == sizes.size());
}

void many_in_flight(bool child, const std::string& kind) {
  constexpr uint64_t kSlot = 64 * 1024, kSlots = 600;
  auto target = make_target(child, kind, 1, kSlot * kSlots);
  REQUIRE(target->ok());
  auto init = make_initiator(kind, 8 * kMiB);
  REQUIRE(init.engine);
  fill_random(init.src.base, init.src.length, 99);
  auto session = init.engine->open_session(target->descriptor());
  REQUIRE(session);

  std::mt19937_64 rng(1234);
  std::vector<WriteOp> all;
  std::vector<BatchPtr> batches;
  uint64_t slot = 0;
  while (slot < kSlots) {
    std::vector<WriteOp> ops;
    const uint64_t n = std::min<uint64_t>(1 + rng() % 3, kSlots - slot);
    for (uint64_t i = 0; i < n; ++i, ++slot) {
      const uint64_t len = 1 + rng() % kSlot;
      const uint64_t dst_off = rng() % (kSlot - len + 1);
      const uint64_t src_off = rng() % (init.src.length - len + 1);
      ops.push_back(WriteOp{init.src.addr() + src_off, target->region(0).base + slot * kSlot + dst_off, len});
    }
    auto b = (*session)->submit(ops);
    REQUIRE(b);
    batches.push_back(*b);
    all.insert(all.end(), ops.begin(), ops.end());
  }
  CHECK(batches.size() > 250);
  for (auto& b : batches) {
    REQUIRE(b->wait(30s));
    REQUIRE(b->status().ok());
  }
  for (const WriteOp& w : all)
    REQUIRE(target->checksum(w.remote_addr, w.len) ==
            xxh(reinterpret_cast<const uint8_t*>(w.local_addr), w.len));
}

}  // namespace

// One section per registered backend (host_backends(): no device needed).
TEST_CASE("every backend: single writes of 1 B .. 64 MiB, same process", "[transfer]") {
  for (const auto& b : host_backends()) DYNAMIC_SECTION(b) single_writes_of_every_size(false, b);
}
TEST_CASE("every backend: single writes of 1 B .. 64 MiB, child process", "[transfer][multiproc]") {
  for (const auto& b : host_backends()) DYNAMIC_SECTION(b) single_writes_of_every_size(true, b);
}
TEST_CASE("every backend: hundreds of random batches in flight, same process", "[transfer]") {
  for (const auto& b : host_backends()) DYNAMIC_SECTION(b) many_in_flight(false, b);
}
TEST_CASE("every backend: hundreds of random batches in flight, child process", "[transfer][multiproc]") {
  for (const auto& b : host_backends()) DYNAMIC_SECTION(b) many_in_flight(true, b);
}

// Backends that need a device (rdma): these run inside the Soft-RoCE VM (ctest label rdma-vm), never on the
// plain host.
TEST_CASE("device backends: single writes of 1 B .. 64 MiB, child process", "[transfer][verbs][multiproc]") {
  for (const auto& b : device_backends()) DYNAMIC_SECTION(b) single_writes_of_every_size(true, b);
}
TEST_CASE("device backends: hundreds of random batches in flight, child process",
          "[transfer][verbs][multiproc]") {
  for (const auto& b : device_backends()) DYNAMIC_SECTION(b) many_in_flight(true, b);
}

TEST_CASE("tcp: one lane, tiny slices and a small in-flight window still deliver", "[transfer][tcp]") {
  LocalTarget target("tcp", 1, 4 * kMiB);
  REQUIRE(target.ok());
  EngineConfig c;
  c.options.set("tcp_lanes", int64_t{1});
  c.options.set("tcp_slice_bytes", int64_t{4096});
  c.options.set("tcp_max_inflight_slices", int64_t{2});
  auto init = make_initiator("tcp", 4 * kMiB, c);
  REQUIRE(init.engine);
  fill_random(init.src.base, init.src.length, 5);
  auto s = init.engine->open_session(target.descriptor());
  REQUIRE(s);
  auto b = (*s)->submit({WriteOp{init.src.addr(), target.region(0).base, init.src.length}});
  REQUIRE(b);
  REQUIRE((*b)->wait(30s));
  REQUIRE((*b)->status().ok());
  CHECK(target.checksum(target.region(0).base, init.src.length) == xxh(init.src.base, init.src.length));
}

namespace {

// The largest buffer the kernel may give one socket for `what` ("tcp_wmem" or "tcp_rmem": min default max).
uint64_t socket_buffer_max(const std::string& what) {
  std::ifstream f("/proc/sys/net/ipv4/" + what);
  uint64_t min = 0, def = 0, max = 0;
  f >> min >> def >> max;
  return max;
}

}  // namespace

// Single small writes are sent by the submitting thread itself while their lane is idle. With the target
// stopped, more bytes than both sockets' buffers can hold are submitted, so some caller's non-blocking write
// is cut short and the lane's sender thread must finish that frame before any queued one. After the target
// resumes every byte is where it belongs.
TEST_CASE("tcp: writes cut short by a full socket finish in order once a stalled target resumes",
          "[transfer][tcp][multiproc]") {
  const uint64_t must_exceed = socket_buffer_max("tcp_wmem") + socket_buffer_max("tcp_rmem");
  const uint64_t bytes = must_exceed + 8 * kMiB;
  ChildTarget target("tcp", 1, bytes + 8 * kMiB);
  REQUIRE(target.ok());
  EngineConfig c;
  c.options.set("tcp_lanes", int64_t{1});
  c.options.set("tcp_max_inflight_slices", int64_t{1} << 16);  // the window must not stop the callers first
  c.options.set("tcp_op_timeout_ms", int64_t{30000});
  auto init = make_initiator("tcp", 8 * kMiB, c);
  REQUIRE(init.engine);
  fill_random(init.src.base, init.src.length, 17);
  auto s = init.engine->open_session(target.descriptor());
  REQUIRE(s);

  REQUIRE(::kill(target.process().pid(), SIGSTOP) == 0);
  std::mt19937_64 rng(42);
  std::vector<WriteOp> all;
  std::vector<BatchPtr> batches;
  uint64_t dst = target.region(0).base;
  auto submit = [&](size_t writes) {
    std::vector<WriteOp> ops;
    for (size_t i = 0; i < writes; ++i) {
      const uint64_t len = 1 + rng() % (64 * 1024);
      const uint64_t src_off = rng() % (init.src.length - len + 1);
      ops.push_back(WriteOp{init.src.addr() + src_off, dst, len});
      dst += len;
    }
    auto b = (*s)->submit(ops);
    REQUIRE(b);
    batches.push_back(*b);
    all.insert(all.end(), ops.begin(), ops.end());
  };
  // Single writes only (the caller writes each while the lane is idle) until the sockets must be full, then
  // batches of two (queued for the lane's sender) between more single writes.
  while (dst - target.region(0).base < bytes) submit(1);
  for (int i = 0; i < 64; ++i) submit(1 + i % 2);
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(batches.back()->finished());  // the target is stopped: the last writes cannot have landed
  REQUIRE(::kill(target.process().pid(), SIGCONT) == 0);
  for (auto& b : batches) {
    REQUIRE(b->wait(60s));
    REQUIRE(b->status().ok());
  }
  CHECK((*s)->healthy());
  for (const WriteOp& w : all)
    REQUIRE(target.checksum(w.remote_addr, w.len) ==
            xxh(reinterpret_cast<const uint8_t*>(w.local_addr), w.len));
}
