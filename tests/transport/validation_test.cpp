// Refusals: remote ranges outside one registered region, bad local ranges and wrong tokens move nothing.
#include <catch2/catch.hpp>

#include <limits>

#include "test_util.hpp"

using namespace epd::test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kRegion = 1 << 20;

struct Snapshot {
  uint64_t r0, r1;
};
Snapshot snapshot(Target& t) {
  return {*t.checksum(t.region(0).base, t.region(0).length),
          *t.checksum(t.region(1).base, t.region(1).length)};
}

void out_of_range_is_refused(bool child, const std::string& kind) {
  auto target = make_target(child, kind, 2, kRegion);
  REQUIRE(target->ok());
  REQUIRE(target->fill(target->region(0).base, kRegion, 0xAB));
  REQUIRE(target->fill(target->region(1).base, kRegion, 0xCD));
  const Snapshot before = snapshot(*target);
  auto init = make_initiator(kind, 2 * kRegion);
  REQUIRE(init.engine);
  fill_random(init.src.base, init.src.length, 3);
  auto s = init.engine->open_session(target->descriptor());
  REQUIRE(s);

  const auto& r0 = target->region(0);
  const auto& r1 = target->region(1);
  const uint64_t src = init.src.addr();
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  struct Bad {
    const char* what;
    WriteOp op;
    ErrorCode code;
  };
  const Bad bad[] = {
      {"before a region", {src, r0.base - 1, 2}, ErrorCode::out_of_range},
      {"after a region", {src, r0.base + r0.length, 1}, ErrorCode::out_of_range},
      {"one past the end", {src, r0.base + r0.length - 4, 5}, ErrorCode::out_of_range},
      {"straddling r0 into r1",
       {src, r0.base + r0.length - 8, 16 + (r1.base > r0.base ? r1.base - r0.base - r0.length : 0)},
       ErrorCode::out_of_range},
      {"straddling r1 into r0",
       {src, r1.base + r1.length - 8, 16 + (r0.base > r1.base ? r0.base - r1.base - r1.length : 0)},
       ErrorCode::out_of_range},
      {"length wraps around", {src, r0.base + 16, max - 8}, ErrorCode::out_of_range},
      {"address near 2^64", {src, max - 4, 16}, ErrorCode::out_of_range},
      {"longer than the region", {src, r0.base, r0.length + 1}, ErrorCode::out_of_range},
      {"local source outside my regions",
       {src + init.src.length - 1, r0.base, 2},
       ErrorCode::local_out_of_range},
      {"length wraps on both sides", {src + 8, r0.base, max - 4}, ErrorCode::out_of_range},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.what);
    // A valid op first: a refused op anywhere in the batch must stop the whole batch.
    auto r = (*s)->submit({WriteOp{src, r0.base, 64}, b.op});
    REQUIRE_FALSE(r);
    CHECK(r.error().code == b.code);
    CHECK_FALSE(r.error().retryable);
  }
  const Snapshot after = snapshot(*target);
  CHECK(after.r0 == before.r0);
  CHECK(after.r1 == before.r1);
  CHECK((*s)->healthy());

  // Exactly the region's bounds are fine.
  auto ok = (*s)->submit({WriteOp{src, r0.base, r0.length}, WriteOp{src, r1.base + r1.length - 1, 1}});
  REQUIRE(ok);
  REQUIRE((*ok)->wait(30s));
  CHECK((*ok)->status().ok());
}

void wrong_token_is_refused(bool child, const std::string& kind) {
  auto target = make_target(child, kind, 2, kRegion);
  REQUIRE(target->ok());
  const Snapshot before = snapshot(*target);
  auto init = make_initiator(kind, kRegion);
  REQUIRE(init.engine);
  fill_random(init.src.base, init.src.length, 4);
  auto forged = target->descriptor();
  forged.token ^= 0x5555;
  auto s = init.engine->open_session(forged);
  if (!find_backend(kind)->caps.fences_writes) {
    // A backend whose writer places the bytes checks the token when the link opens: shm in the target's
    // control page before mapping anything, rdma in its QP handshake before any QP exists.
    REQUIRE_FALSE(s);
    CHECK(s.error().code == ErrorCode::bad_token);
  } else {
    // A backend whose receiver places every write (tcp) carries the token in every frame; the receiver
    // refuses each one.
    REQUIRE(s);
    auto b = (*s)->submit({WriteOp{init.src.addr(), forged.regions[0].base, kRegion}});
    REQUIRE(b);
    REQUIRE((*b)->wait(30s));
    REQUIRE_FALSE((*b)->status().ok());
    CHECK((*b)->status().error().code == ErrorCode::bad_token);
    // The stream stayed framed: the next refused write is answered too.
    auto b2 = (*s)->submit({WriteOp{init.src.addr(), forged.regions[1].base, 100}});
    REQUIRE(b2);
    REQUIRE((*b2)->wait(30s));
    CHECK((*b2)->status().error().code == ErrorCode::bad_token);
  }
  const Snapshot after = snapshot(*target);
  CHECK(after.r0 == before.r0);
  CHECK(after.r1 == before.r1);
}

}  // namespace

// One section per registered backend (host_backends(): no device needed).
TEST_CASE("every backend: out-of-range writes are refused, same process", "[validation]") {
  for (const auto& b : host_backends()) DYNAMIC_SECTION(b) out_of_range_is_refused(false, b);
}
TEST_CASE("every backend: out-of-range writes are refused, child process", "[validation][multiproc]") {
  for (const auto& b : host_backends()) DYNAMIC_SECTION(b) out_of_range_is_refused(true, b);
}
TEST_CASE("every backend: a wrong token is refused, same process", "[validation]") {
  for (const auto& b : host_backends()) DYNAMIC_SECTION(b) wrong_token_is_refused(false, b);
}
TEST_CASE("every backend: a wrong token is refused, child process", "[validation][multiproc]") {
  for (const auto& b : host_backends()) DYNAMIC_SECTION(b) wrong_token_is_refused(true, b);
}

// Backends that need a device (rdma): inside the Soft-RoCE VM only.
TEST_CASE("device backends: out-of-range writes are refused, child process",
          "[validation][verbs][multiproc]") {
  for (const auto& b : device_backends()) DYNAMIC_SECTION(b) out_of_range_is_refused(true, b);
}
TEST_CASE("device backends: a wrong token is refused, child process", "[validation][verbs][multiproc]") {
  for (const auto& b : device_backends()) DYNAMIC_SECTION(b) wrong_token_is_refused(true, b);
}
