// Write fences: the table's rules, and the tcp receiver refusing a write whose grant was revoked (a stale
// writer) while the bytes in place stay untouched.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "epd/transport/backend_info.hpp"
#include "epd/transport/fence.hpp"
#include "shm/shm_info.hpp"
#include "test_util.hpp"

using namespace epd::test;

namespace {
constexpr uint64_t kBase = 1 << 20, kUnit = 4096, kUnits = 8;
using A = FenceTable::Admission;
}  // namespace

TEST_CASE("fence table: a write is admitted only under the key owning every unit it touches", "[fence]") {
  FenceTable t;
  t.add_region(kBase, kUnit * kUnits, kUnit);
  const uint64_t mine[] = {1, 2}, theirs[] = {3};
  const uint64_t a = t.grant(kBase, mine), b = t.grant(kBase, theirs);
  REQUIRE(a != 0);
  REQUIRE(b != 0);
  CHECK(a != b);
  CHECK(t.admit(a, kBase + kUnit, 2 * kUnit) == A::admitted);  // units 1-2
  t.landed(a);
  CHECK(t.admit(a, kBase + kUnit + 10, 5) == A::admitted);  // inside unit 1
  t.landed(a);
  CHECK(t.admit(a, kBase + 2 * kUnit, kUnit + 1) == A::refused);  // spills into b's unit 3
  CHECK(t.admit(b, kBase + kUnit, 1) == A::refused);              // a's unit
  CHECK(t.admit(0, kBase, 1) == A::refused);                      // no key into a fenced region
  CHECK(t.admit(12345, kBase + kUnit, 1) == A::refused);          // a key nobody granted
  CHECK(t.admit(0, kBase + kUnit * kUnits, 64) == A::unfenced);   // past the fenced region
  CHECK(t.stats().refused == 4);
  CHECK(t.stats().grants == 2);
  // Granting a unit to another key takes it from the first.
  const uint64_t again[] = {2};
  const uint64_t c = t.grant(kBase, again);
  CHECK(t.admit(a, kBase + 2 * kUnit, 1) == A::refused);
  CHECK(t.admit(c, kBase + 2 * kUnit, 1) == A::admitted);
  t.landed(c);
  CHECK(t.grant(kBase + 1, again) == 0);  // no region fenced there
}

TEST_CASE("fence table: a key's byte ranges, adjacent units merged, keys that lose units reported",
          "[fence]") {
  FenceTable t;
  t.add_region(kBase, kUnit * kUnits - 100, kUnit);  // the last unit is short
  const uint64_t units[] = {5, 1, 2, 7, 2};
  const uint64_t k = t.grant(kBase, units);
  using R = std::vector<std::pair<uint64_t, uint64_t>>;
  CHECK(t.ranges(k) ==
        R{{kBase + kUnit, 2 * kUnit}, {kBase + 5 * kUnit, kUnit}, {kBase + 7 * kUnit, kUnit - 100}});
  CHECK(t.ranges(0).empty());
  CHECK(t.ranges(999).empty());
  std::vector<uint64_t> displaced;
  const uint64_t two[] = {2, 3};
  const uint64_t k2 = t.grant(kBase, two, 0, &displaced);
  CHECK(displaced == std::vector<uint64_t>{k});
  CHECK(t.ranges(k) ==
        R{{kBase + kUnit, kUnit}, {kBase + 5 * kUnit, kUnit}, {kBase + 7 * kUnit, kUnit - 100}});
  CHECK(t.ranges(k2) == R{{kBase + 2 * kUnit, 2 * kUnit}});
  CHECK(t.revoke(k));
  CHECK(t.ranges(k).empty());  // a revoked key owns nothing
  t.count_refused();
  CHECK(t.stats().refused == 1);
}

TEST_CASE("fence table: revoking waits for a write still landing, and refuses new ones at once", "[fence]") {
  FenceTable t;
  t.add_region(kBase, kUnit * kUnits, kUnit);
  const uint64_t units[] = {0};
  const uint64_t k = t.grant(kBase, units);
  REQUIRE(t.admit(k, kBase, 100) == A::admitted);  // a frame is being received
  CHECK_FALSE(t.revoke(k));                        // not reusable yet
  CHECK(t.admit(k, kBase, 100) == A::refused);     // but nothing new gets in
  CHECK_FALSE(t.revoke(k));
  CHECK(t.stats().revoked_busy == 1);
  t.landed(k);
  CHECK(t.revoke(k));  // now it is
  CHECK(t.stats().grants == 0);
  CHECK(t.revoke(k));  // idempotent
}

TEST_CASE("fenced region over tcp: a stale writer is refused with 'fenced', the bytes stay", "[fence]") {
  LocalTarget target("tcp", 0, 0);
  REQUIRE(target.ok());
  Engine& engine = target.engine();
  auto fenced = engine.allocate("kv", kUnit * kUnits, kUnit);
  auto open = engine.allocate("ring", kUnit);
  REQUIRE(fenced);
  REQUIRE(open);
  std::memset(fenced->base, 0xAB, fenced->length);
  const auto desc = engine.descriptor();
  auto init = make_initiator("tcp", kUnit);
  REQUIRE(init.engine);
  fill_random(init.src.base, init.src.length, 7);
  auto session = init.engine->open_session(desc);
  REQUIRE(session);
  auto write = [&](uint64_t remote, uint64_t fence) {
    const WriteOp op{init.src.addr(), remote, kUnit, fence};
    auto batch = (*session)->submit(std::span<const WriteOp>(&op, 1));
    REQUIRE(batch);
    REQUIRE((*batch)->wait(std::chrono::seconds(10)));
    return (*batch)->status();
  };
  const uint64_t unit[] = {2};
  const uint64_t key = engine.grant_writes(fenced->addr(), unit);
  const uint64_t target_addr = fenced->addr() + 2 * kUnit;
  CHECK(write(target_addr, key));  // the grant holder writes
  CHECK(xxh(fenced->base + 2 * kUnit, kUnit) == xxh(init.src.base, kUnit));
  CHECK(write(open->addr(), 0));  // an unfenced region takes writes without a key

  std::memset(fenced->base + 2 * kUnit, 0xCD, kUnit);  // the unit now holds another room's bytes
  REQUIRE(engine.revoke_writes(key));
  const auto late = write(target_addr, key);
  REQUIRE_FALSE(late);
  CHECK(late.error().code == ErrorCode::fenced);
  CHECK_FALSE(write(fenced->addr(), 0));  // no key at all
  for (uint64_t i = 0; i < kUnit; ++i) REQUIRE(fenced->base[2 * kUnit + i] == 0xCD);
  CHECK(engine.fence_stats().refused == 2);
  CHECK(write(open->addr(), 0));  // the connection still serves
}

TEST_CASE("fences_writes_from: only a writer that can reach us through tcp alone is fenced", "[fence]") {
  LocalTarget tcp_only("tcp", 1, kUnit), both("shm,tcp", 1, kUnit), writer("shm,tcp", 1, kUnit);
  REQUIRE(tcp_only.ok());
  REQUIRE(both.ok());
  REQUIRE(writer.ok());
  const auto same_host = writer.descriptor();
  auto other_host = same_host;
  other_host.host_id = "another-host";
  CHECK(tcp_only.engine().fences_writes_from(same_host));    // we serve tcp only: every frame is checked
  CHECK_FALSE(both.engine().fences_writes_from(same_host));  // it could map our memory (shm)
  CHECK(both.engine().fences_writes_from(other_host));       // shm needs the same host
  CHECK_FALSE(both.engine().writer_gone(same_host));         // that process (this one) lives
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  auto gone = same_host;
  auto shm = decode_info<shm::ShmInfo>(gone, shm::kName);  // the pid that proves a same-host writer gone
  REQUIRE(shm);
  shm->pid = child;
  gone.backends[shm::kName] = encode_info(*shm);
  CHECK(both.engine().writer_gone(gone));              // its process is gone: it writes nothing any more
  CHECK_FALSE(both.engine().writer_gone(other_host));  // another host's process is never known gone here
}
