// rdma-specific cases on real verbs (the shared conformance cases run on rdma from tests/transport). They
// need an RDMA device, so they run inside the Soft-RoCE VM (scripts/rdma-vm, ctest label rdma-vm). Tagged
// [verbs]; on a host without devices every case fails at once with a clear message rather than passing.
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "epd/transport/backend_info.hpp"
#include "handshake.hpp"
#include "rdma_info.hpp"
#include "test_util.hpp"

using namespace epd::test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kMiB = 1u << 20;

void require_device() {
  int n = 0;
  ibv_device** l = ibv_get_device_list(&n);
  if (l) ibv_free_device_list(l);
  if (!l || n == 0) FAIL("no RDMA device: run these tests in the Soft-RoCE VM (scripts/rdma-vm)");
}

// Initiator forced onto rdma with a random source region.
Initiator rdma_initiator(uint64_t src_bytes, EngineConfig config = {}) {
  config.offer = {"rdma"};
  auto init = make_initiator("rdma", src_bytes, config);
  REQUIRE(init.engine);
  fill_random(init.src.base, init.src.length, 42);
  return init;
}

Status wait_batch(const BatchPtr& b, std::chrono::milliseconds limit = 20s) {
  if (!b->wait(limit)) return make_error(ErrorCode::timeout, "test: batch did not finish");
  return b->status();
}

}  // namespace

TEST_CASE("rdma: bounded WRs per QP: small slices over 3 QPs, 8 WRs each, bytes verified",
          "[verbs][multiproc]") {
  require_device();
  ChildTarget target("rdma", 2, 16 * kMiB);
  REQUIRE(target.ok());
  EngineConfig cfg;
  cfg.options.set("rdma_slice_bytes", int64_t{256 * 1024});  // several slices per op, bounded WRs per QP
  cfg.options.set("rdma_max_outstanding_wr", int64_t{8});
  cfg.options.set("rdma_qps_per_peer", int64_t{3});
  auto init = rdma_initiator(16 * kMiB, cfg);
  auto session = init.engine->open_session(target.descriptor());
  REQUIRE(session.ok());
  const auto& r0 = target.region(0);
  const auto& r1 = target.region(1);
  std::vector<BatchPtr> batches;
  // 128 batches of 128 KiB cover region 0; one batch of 2048 small ops scatters into region 1.
  for (uint64_t i = 0; i < 128; ++i) {
    auto b =
        (*session)->submit({WriteOp{init.src.addr() + i * 128 * 1024, r0.base + i * 128 * 1024, 128 * 1024}});
    REQUIRE(b.ok());
    batches.push_back(*b);
  }
  std::vector<WriteOp> ops;
  for (uint64_t i = 0; i < 2048; ++i) ops.push_back({init.src.addr() + i * 8192, r1.base + i * 8192, 8192});
  auto big = (*session)->submit(ops);
  REQUIRE(big.ok());
  batches.push_back(*big);
  for (auto& b : batches) REQUIRE(wait_batch(b).ok());
  CHECK(target.checksum(r0.base, 16 * kMiB) == xxh(init.src.base, 16 * kMiB));
  CHECK(target.checksum(r1.base, 16 * kMiB) == xxh(init.src.base, 16 * kMiB));
  const auto stats = (*session)->stats();
  CHECK(stats.batches_ok == batches.size());
  CHECK(stats.bytes_ok == 32 * kMiB);
}

TEST_CASE("rdma: the NIC's remote-access refusal maps to remote_access, then the link reconnects",
          "[verbs][multiproc]") {
  require_device();
  ChildTarget target("rdma", 2, kMiB);
  REQUIRE(target.ok());
  auto init = rdma_initiator(kMiB);
  // A descriptor that lies (wrong rkey for region 1) gets past every software check; the target's
  // device refuses the write.
  auto desc = target.descriptor();
  auto info = decode_info<rdma::RdmaInfo>(desc, rdma::kName);
  REQUIRE(info);
  REQUIRE(info->regions.size() == 2);
  REQUIRE(info->regions[1].id == desc.regions[1].id);
  info->regions[1].rkey ^= 0x5a5a00;
  desc.backends[rdma::kName] = encode_info(*info);
  auto session = init.engine->open_session(desc);
  REQUIRE(session.ok());
  const auto& r0 = target.region(0);
  const auto& r1 = target.region(1);
  REQUIRE(target.fill(r1.base, r1.length, 0));
  const auto before = target.checksum(r1.base, r1.length);
  auto bad = (*session)->submit({WriteOp{init.src.addr(), r1.base, 4096}});
  REQUIRE(bad.ok());
  auto st = wait_batch(*bad);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == ErrorCode::remote_access);
  CHECK(target.checksum(r1.base, r1.length) == before);
  // The same session reconnects on its next use; region 0's key is right.
  auto good = (*session)->submit({WriteOp{init.src.addr(), r0.base, 65536}});
  REQUIRE(good.ok());
  REQUIRE(wait_batch(*good).ok());
  CHECK(target.checksum(r0.base, 65536) == xxh(init.src.base, 65536));
  CHECK((*session)->healthy());
}

TEST_CASE("rdma: simultaneous connects from both sides", "[verbs]") {
  require_device();
  for (int round = 0; round < 3; ++round) {
    EngineConfig ca, cb;
    ca.instance_id = "a";
    cb.instance_id = "b";
    for (auto* c : {&ca, &cb}) {
      c->offer = {"rdma"};
      c->force = "rdma";
    }
    auto a = Engine::create(ca);
    auto b = Engine::create(cb);
    REQUIRE((a.ok() && b.ok()));
    auto ra = (*a)->allocate("ra", kMiB);
    auto rb = (*b)->allocate("rb", kMiB);
    REQUIRE((ra.ok() && rb.ok()));
    fill_random(ra->base, kMiB / 2, 1);
    fill_random(rb->base, kMiB / 2, 2);
    const auto da = (*a)->descriptor(), db = (*b)->descriptor();
    Result<SessionPtr> sab = make_error(ErrorCode::internal, ""), sba = make_error(ErrorCode::internal, "");
    std::thread t1([&] { sab = (*a)->open_session(db); });
    std::thread t2([&] { sba = (*b)->open_session(da); });
    t1.join();
    t2.join();
    REQUIRE(sab.ok());
    REQUIRE(sba.ok());
    auto w1 = (*sab)->submit({WriteOp{ra->addr(), db.regions[0].base + kMiB / 2, kMiB / 2}});
    auto w2 = (*sba)->submit({WriteOp{rb->addr(), da.regions[0].base + kMiB / 2, kMiB / 2}});
    REQUIRE((w1.ok() && w2.ok()));
    REQUIRE(wait_batch(*w1).ok());
    REQUIRE(wait_batch(*w2).ok());
    CHECK(xxh(rb->base + kMiB / 2, kMiB / 2) == xxh(ra->base, kMiB / 2));
    CHECK(xxh(ra->base + kMiB / 2, kMiB / 2) == xxh(rb->base, kMiB / 2));
  }
}

TEST_CASE("rdma: chosen when both ends offer it on different hosts; shm wins on one host", "[verbs]") {
  require_device();
  EngineConfig ca, cb;
  ca.instance_id = "a";
  cb.instance_id = "b";
  ca.offer = cb.offer = {"shm", "rdma", "tcp"};
  ca.host_id = "host-a";
  cb.host_id = "host-b";
  auto a = Engine::create(ca);
  auto b = Engine::create(cb);
  REQUIRE((a.ok() && b.ok()));
  auto kind = (*a)->choose_backend((*b)->descriptor());
  REQUIRE(kind.ok());
  CHECK(*kind == "rdma");
  cb.host_id = "host-a";
  cb.instance_id = "c";
  auto c = Engine::create(cb);
  REQUIRE(c.ok());
  auto same = (*a)->choose_backend((*c)->descriptor());
  REQUIRE(same.ok());
  CHECK(*same == "shm");
}

TEST_CASE("rdma: a silent handshake client does not hold up another peer's handshake", "[verbs]") {
  require_device();
  // The target waits up to 30 s for a request to arrive whole; a listener that served one connection at a
  // time would be stuck on the silent one (the old code gave up on it after 2 s with a reject and EOF).
  EngineConfig tc;
  tc.instance_id = "target";
  tc.offer = {"rdma"};
  tc.options.set("rdma_op_timeout_ms", int64_t{30000});
  auto target = Engine::create(tc);
  REQUIRE(target.ok());
  auto region = (*target)->allocate("dst", kMiB);
  REQUIRE(region.ok());
  const auto desc = (*target)->descriptor();
  const auto info = decode_info<rdma::RdmaInfo>(desc, rdma::kName);
  REQUIRE(info);
  const auto far = rdma::Clock::now() + 5s;
  // Two silent peers: one sends nothing, one half a header.
  auto silent = rdma::connect_tcp(info->handshake_endpoint, far);
  auto half = rdma::connect_tcp(info->handshake_endpoint, far);
  REQUIRE((silent.ok() && half.ok()));
  const uint8_t partial[10] = {'E', 'P', 'D', 'R', rdma::kHandshakeVersion, 1, 0, 2, 5, 0};
  REQUIRE(rdma::write_all(*half, partial, far).ok());
  auto init = rdma_initiator(kMiB);
  auto session = init.engine->open_session(desc);
  REQUIRE(session.ok());
  auto b = (*session)->submit({WriteOp{init.src.addr(), desc.regions[0].base, 65536}});
  REQUIRE(b.ok());
  REQUIRE(wait_batch(*b).ok());
  CHECK(xxh(region->base, 65536) == xxh(init.src.base, 65536));
  // Both silent connections are still waiting: nothing was sent to them and they were not closed.
  for (int fd : {*silent, *half}) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    CHECK(poll(&p, 1, 0) == 0);
  }
  // A request that then completes is served as usual: here a malformed one, refused with a reject.
  const uint8_t rest[34 + 16] = {};  // the rest of the header and two zero QPs
  REQUIRE(rdma::write_all(*half, rest, far).ok());
  auto reply = rdma::read_hello(*half, far);
  REQUIRE(reply.ok());
  CHECK(reply->kind == rdma::HelloKind::reject);
  ::close(*silent);
  ::close(*half);
}

TEST_CASE("rdma: a completion error on one peer's QPs leaves another peer's link and batches untouched",
          "[verbs][multiproc]") {
  require_device();
  ChildTarget bad_target("rdma", 1, 4 * kMiB);
  ChildTarget good_target("rdma", 1, 4 * kMiB);
  REQUIRE((bad_target.ok() && good_target.ok()));
  auto init = rdma_initiator(4 * kMiB);
  // The bad peer's descriptor lies about its rkey: its device refuses the write and the QP goes to error.
  auto bad_desc = bad_target.descriptor();
  auto info = decode_info<rdma::RdmaInfo>(bad_desc, rdma::kName);
  REQUIRE(info);
  info->regions[0].rkey ^= 0x5a5a00;
  bad_desc.backends[rdma::kName] = encode_info(*info);
  auto bad = init.engine->open_session(bad_desc);
  auto good = init.engine->open_session(good_target.descriptor());
  REQUIRE((bad.ok() && good.ok()));
  const auto& dst = good_target.region(0);
  // The good peer's writes are in flight on the same CQ and completion thread while the bad one fails.
  std::vector<BatchPtr> in_flight;
  for (uint64_t i = 0; i < 16; ++i) {
    auto b =
        (*good)->submit({WriteOp{init.src.addr() + i * 256 * 1024, dst.base + i * 256 * 1024, 256 * 1024}});
    REQUIRE(b.ok());
    in_flight.push_back(*b);
    if (i == 4) {
      auto refused = (*bad)->submit({WriteOp{init.src.addr(), bad_target.region(0).base, 4096}});
      REQUIRE(refused.ok());
      auto st = wait_batch(*refused);
      REQUIRE_FALSE(st.ok());
      CHECK(st.error().code == ErrorCode::remote_access);
    }
  }
  for (auto& b : in_flight) CHECK(wait_batch(b).ok());
  CHECK(good_target.checksum(dst.base, 4 * kMiB) == xxh(init.src.base, 4 * kMiB));
  CHECK((*good)->healthy());
  CHECK((*good)->stats().batches_failed == 0);
}

namespace {

// Waits (bounded) until the target has counted `n` refused writes; the count comes from its handshake
// thread, which finds the responder QP the device moved to error within a tick.
uint64_t wait_refused(Engine& target, uint64_t n) {
  for (int i = 0; i < 200 && target.fence_stats().refused < n; ++i) std::this_thread::sleep_for(50ms);
  return target.fence_stats().refused;
}

}  // namespace

TEST_CASE(
    "rdma: a revoked grant's rkey is refused by the target's device, the new owner's bytes stay, "
    "other grants and writers go on",
    "[verbs]") {
  require_device();
  constexpr uint64_t kUnit = 64 * 1024;
  EngineConfig ct;
  ct.instance_id = "decode";
  ct.offer = {"rdma"};
  ct.force = "rdma";
  auto target = Engine::create(ct);
  REQUIRE(target.ok());
  auto pool = (*target)->allocate("kv", 16 * kUnit, kUnit);  // fenced, one unit per page
  REQUIRE(pool.ok());
  const auto desc = (*target)->descriptor();
  auto info = decode_info<rdma::RdmaInfo>(desc, rdma::kName);
  REQUIRE(info);
  CHECK(info->regions.at(0).rkey == 0);  // the pool's own registration is never handed out
  auto a = rdma_initiator(16 * kUnit);
  auto b = rdma_initiator(16 * kUnit);
  fill_random(b.src.base, b.src.length, 7);
  auto sa = a.engine->open_session(desc);
  auto sb = b.engine->open_session(desc);
  REQUIRE((sa.ok() && sb.ok()));
  const uint64_t base = pool->addr();
  auto page = [&](uint64_t i) { return base + i * kUnit; };

  // Room 1 (pages 2, 3) and room 2 (page 8) are A's; a write under room 1's key fetches its rkeys once.
  const std::array<uint64_t, 2> room1{2, 3};
  const std::array<uint64_t, 1> room2{8};
  const uint64_t key1 = (*target)->grant_writes(base, room1);
  const uint64_t key2 = (*target)->grant_writes(base, room2);
  REQUIRE((key1 != 0 && key2 != 0));
  auto w = (*sa)->submit({WriteOp{a.src.addr(), page(2), 2 * kUnit, key1}});
  REQUIRE(w.ok());
  REQUIRE(wait_batch(*w).ok());
  CHECK(xxh(pool->base + 2 * kUnit, 2 * kUnit) == xxh(a.src.base, 2 * kUnit));
  // Outside its grant there is no rkey to use: refused before anything is posted.
  auto outside = (*sa)->submit({WriteOp{a.src.addr(), page(4), kUnit, key1}});
  REQUIRE(outside.ok());
  auto st = wait_batch(*outside);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == ErrorCode::fenced);
  CHECK(xxh(pool->base + 4 * kUnit, kUnit) == xxh(pool->base + 5 * kUnit, kUnit));  // both still zero

  // Decode gives room 1 up: revoked (deregistered), and its pages go to B's room 3 at once.
  REQUIRE((*target)->revoke_writes(key1));
  const uint64_t key3 = (*target)->grant_writes(base, room1);
  auto wb = (*sb)->submit({WriteOp{b.src.addr(), page(2), 2 * kUnit, key3}});
  REQUIRE(wb.ok());
  REQUIRE(wait_batch(*wb).ok());
  const uint64_t b_bytes = xxh(b.src.base, 2 * kUnit);
  REQUIRE(xxh(pool->base + 2 * kUnit, 2 * kUnit) == b_bytes);

  // A wakes up and writes room 1 with the rkey it kept, and room 2's writes follow on the same link: the
  // device refuses the stale one; room 2's that were posted behind it are re-posted on fresh QPs and land.
  auto stale = (*sa)->submit({WriteOp{a.src.addr() + 4 * kUnit, page(2), 2 * kUnit, key1}});
  REQUIRE(stale.ok());
  std::vector<BatchPtr> room2_writes;
  for (int i = 0; i < 16; ++i) {
    auto r2 = (*sa)->submit({WriteOp{a.src.addr() + 8 * kUnit, page(8), kUnit, key2}});
    REQUIRE(r2.ok());
    room2_writes.push_back(*r2);
  }
  st = wait_batch(*stale);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == ErrorCode::fenced);
  for (auto& r2 : room2_writes) CHECK(wait_batch(r2).ok());
  CHECK(xxh(pool->base + 2 * kUnit, 2 * kUnit) == b_bytes);  // B's room is untouched
  CHECK(xxh(pool->base + 8 * kUnit, kUnit) == xxh(a.src.base + 8 * kUnit, kUnit));
  CHECK(wait_refused(**target, 1) >= 1);  // counted at decode (fenced_writes)

  // B's link never noticed; A's link serves room 2 again.
  auto wb2 = (*sb)->submit({WriteOp{b.src.addr() + 2 * kUnit, page(2), kUnit, key3}});
  REQUIRE(wb2.ok());
  CHECK(wait_batch(*wb2).ok());
  CHECK((*sb)->stats().batches_failed == 0);
  auto again = (*sa)->submit({WriteOp{a.src.addr(), page(8), kUnit, key2}});
  REQUIRE(again.ok());
  CHECK(wait_batch(*again).ok());
  CHECK((*sa)->healthy());

  // A writer that never held room 1's keys asks for them after the revocation: refused and counted too.
  const uint64_t before = (*target)->fence_stats().refused;
  auto late = (*sb)->submit({WriteOp{b.src.addr(), page(2), kUnit, key1}});
  REQUIRE(late.ok());
  st = wait_batch(*late);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == ErrorCode::fenced);
  CHECK((*target)->fence_stats().refused == before + 1);
  CHECK(xxh(pool->base + 2 * kUnit, kUnit) == xxh(b.src.base + 2 * kUnit, kUnit));
  CHECK((*target)->revoke_writes(key2));
  CHECK((*target)->revoke_writes(key3));
  CHECK((*target)->fence_stats().grants == 0);
}

// What a grant costs in registrations (printed; under qemu TCG, so only the order of magnitude means
// anything, and real NICs differ again).
TEST_CASE("rdma: ibv_reg_mr per grant, over memory already registered", "[verbs]") {
  require_device();
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(n > 0);
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  REQUIRE(ctx);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd);
  const uint64_t pool_bytes = 64 * kMiB;
  std::vector<uint8_t> pool(pool_bytes, 1);
  ibv_mr* whole = ibv_reg_mr(pd, pool.data(), pool_bytes, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(whole);
  for (uint64_t bytes : {uint64_t{64 * 1024}, uint64_t{kMiB}, uint64_t{8 * kMiB}}) {
    constexpr int kRounds = 50;
    std::chrono::nanoseconds reg{0}, dereg{0};
    for (int i = 0; i < kRounds; ++i) {
      uint8_t* at = pool.data() + (uint64_t(i) * bytes) % (pool_bytes - bytes);
      const auto t0 = std::chrono::steady_clock::now();
      ibv_mr* mr = ibv_reg_mr(pd, at, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      const auto t1 = std::chrono::steady_clock::now();
      REQUIRE(mr);
      REQUIRE(ibv_dereg_mr(mr) == 0);
      reg += t1 - t0;
      dereg += std::chrono::steady_clock::now() - t1;
    }
    std::printf("[rdma-reg] %s: grant of %lu KiB: ibv_reg_mr %.1f us, ibv_dereg_mr %.1f us (mean of %d)\n",
                ibv_get_device_name(ctx->device), (unsigned long)(bytes / 1024),
                double(reg.count()) / kRounds / 1000, double(dereg.count()) / kRounds / 1000, kRounds);
  }
  std::fflush(stdout);
  ibv_dereg_mr(whole);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
}
