// The fault backend does exactly what its config says, reproducibly for a seed.
#include <catch2/catch.hpp>
#include <stdexcept>

#include "test_util.hpp"

using namespace epd::test;
using namespace std::chrono_literals;

namespace {

struct Rig {
  std::unique_ptr<LocalTarget> target;
  Initiator init;
  SessionPtr session;
};

Rig make_rig(const std::string& kind, FaultConfig fault) {
  Rig rig;
  rig.target = std::make_unique<LocalTarget>(kind, 1, 1 << 20);
  REQUIRE(rig.target->ok());
  EngineConfig c;
  c.fault = fault;
  c.fault.enabled = true;
  rig.init = make_initiator(kind, 1 << 20, c);
  REQUIRE(rig.init.engine);
  fill_random(rig.init.src.base, rig.init.src.length, 11);
  auto s = rig.init.engine->open_session(rig.target->descriptor());
  REQUIRE(s);
  rig.session = *s;
  return rig;
}

}  // namespace

TEST_CASE("fault: error rate fails exactly the ops the seed picks", "[fault]") {
  auto kind = GENERATE(from_range(host_backends()));
  CAPTURE(kind);
  FaultConfig f;
  f.error_rate = 0.3;
  f.seed = 42;
  Rig rig = make_rig(kind, f);
  const uint64_t base = rig.target->region(0).base;
  REQUIRE(rig.target->fill(base, 200 * 64, 0));
  uint64_t expected_failures = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    const bool should_fail = fault_injects(42, i, 0.3);
    expected_failures += should_fail;
    auto b = rig.session->submit({WriteOp{rig.init.src.addr() + i * 64, base + i * 64, 64}});
    REQUIRE(b);
    REQUIRE((*b)->wait(10s));
    REQUIRE((*b)->status().ok() == !should_fail);
    if (should_fail) {
      CHECK((*b)->status().error().code == ErrorCode::injected_fault);
      CHECK((*b)->status().error().retryable);
      CHECK(*rig.target->checksum(base + i * 64, 64) == xxh(std::vector<uint8_t>(64, 0).data(), 64));
    } else {
      CHECK(*rig.target->checksum(base + i * 64, 64) == xxh(rig.init.src.base + i * 64, 64));
    }
  }
  // The seed gives roughly the rate, and the counters agree with what happened.
  CHECK(expected_failures > 30);
  CHECK(expected_failures < 90);
  const FaultStats st = rig.init.engine->fault_stats();
  CHECK(st.ops == 200);
  CHECK(st.injected_errors == expected_failures);
  CHECK(st.thrown == 0);
  CHECK(rig.session->stats().batches_failed == expected_failures);
}

TEST_CASE("fault: the decision is a pure function of seed and op index", "[fault]") {
  uint64_t same = 0, differ = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    CHECK(fault_injects(7, i, 0.5) == fault_injects(7, i, 0.5));
    (fault_injects(7, i, 0.5) == fault_injects(8, i, 0.5) ? same : differ)++;
    CHECK_FALSE(fault_injects(7, i, 0.0));
    CHECK(fault_injects(7, i, 1.0));
  }
  CHECK(differ > 300);  // another seed is another sequence
}

TEST_CASE("fault: throw_after_ops throws in the submitting thread from op N on", "[fault]") {
  FaultConfig f;
  f.throw_after_ops = 5;
  Rig rig = make_rig("shm", f);
  const uint64_t dst = rig.target->region(0).base;
  auto op = WriteOp{rig.init.src.addr(), dst, 8};
  // Ops 1-2 and 3-4 in two batches pass; the batch holding op 5 throws, and so does every later one.
  REQUIRE(rig.session->submit({op, op}));
  REQUIRE(rig.session->submit({op, op}));
  CHECK(rig.session->healthy());
  CHECK_THROWS_AS(rig.session->submit({op}), std::runtime_error);
  CHECK_THROWS_AS(rig.session->submit({op}), std::runtime_error);
  CHECK_FALSE(rig.session->healthy());
  const FaultStats st = rig.init.engine->fault_stats();
  CHECK(st.thrown == 2);
  CHECK(st.ops == 6);
  // A fresh session starts counting again (what a restarted worker gets).
  auto fresh = rig.init.engine->open_session(rig.target->descriptor());
  REQUIRE(fresh);
  CHECK((*fresh)->submit({op, op, op, op}));
}

TEST_CASE("fault: throw_max bounds the throws of the whole engine, later sessions run clean", "[fault]") {
  FaultConfig f;
  f.throw_after_ops = 2;
  f.throw_max = 2;
  Rig rig = make_rig("shm", f);
  const uint64_t dst = rig.target->region(0).base;
  auto op = WriteOp{rig.init.src.addr(), dst, 8};
  // Two sessions crash at their second op, as two restarted workers would; the third never does.
  for (int crash = 0; crash < 2; ++crash) {
    auto s = rig.init.engine->open_session(rig.target->descriptor());
    REQUIRE(s);
    REQUIRE((*s)->submit({op}));
    CHECK_THROWS_AS((*s)->submit({op}), std::runtime_error);
    CHECK_FALSE((*s)->healthy());
  }
  auto s = rig.init.engine->open_session(rig.target->descriptor());
  REQUIRE(s);
  for (int i = 0; i < 5; ++i) {
    auto b = (*s)->submit({op});
    REQUIRE(b);
    REQUIRE((*b)->wait(10s));
    CHECK((*b)->status().ok());
  }
  CHECK((*s)->healthy());
  CHECK(rig.init.engine->fault_stats().thrown == 2);
}

TEST_CASE("fault: delay defers completion without blocking the submitter", "[fault]") {
  auto kind = GENERATE(from_range(host_backends()));
  CAPTURE(kind);
  FaultConfig f;
  f.delay_us = 1'000'000;
  Rig rig = make_rig(kind, f);
  const uint64_t dst = rig.target->region(0).base;
  const auto t0 = std::chrono::steady_clock::now();
  auto b = rig.session->submit({WriteOp{rig.init.src.addr(), dst, 4096}});
  REQUIRE(b);
  CHECK(std::chrono::steady_clock::now() - t0 < 900ms);  // the submitter did not sit out the delay
  CHECK((*b)->poll() == Batch::State::pending);
  REQUIRE((*b)->wait(10s));
  CHECK((*b)->status().ok());
  CHECK(*rig.target->checksum(dst, 4096) == xxh(rig.init.src.base, 4096));
  CHECK(rig.init.engine->fault_stats().delayed == 1);

  // Closing with a delayed completion pending fails it instead of leaving it hanging.
  auto pending = rig.session->submit({WriteOp{rig.init.src.addr(), dst, 4096}});
  REQUIRE(pending);
  rig.session->close();
  REQUIRE((*pending)->wait(10s));
  CHECK((*pending)->status().error().code == ErrorCode::session_closed);
}

TEST_CASE("fault: error rate 1 fails every batch, nothing moves", "[fault]") {
  FaultConfig f;
  f.error_rate = 1.0;
  Rig rig = make_rig("tcp", f);
  const uint64_t dst = rig.target->region(0).base;
  const uint64_t before = *rig.target->checksum(dst, 1 << 20);
  for (int i = 0; i < 20; ++i) {
    auto b = rig.session->submit({WriteOp{rig.init.src.addr(), dst, 1 << 20}});
    REQUIRE(b);
    REQUIRE((*b)->wait(10s));
    CHECK((*b)->status().error().code == ErrorCode::injected_fault);
  }
  CHECK(*rig.target->checksum(dst, 1 << 20) == before);
  CHECK(rig.init.engine->fault_stats().injected_errors == 20);
}

TEST_CASE("fault: each session of an engine draws its own stream, the first one the seed itself", "[fault]") {
  CHECK(fault_session_seed(42, 0) == 42);
  CHECK(fault_session_seed(42, 1) != 42);
  CHECK(fault_session_seed(42, 1) != fault_session_seed(42, 2));
  FaultConfig f;
  f.error_rate = 0.5;
  f.seed = 9;
  Rig rig = make_rig("shm", f);                                           // session 0
  auto second = rig.init.engine->open_session(rig.target->descriptor());  // session 1
  REQUIRE(second);
  const uint64_t dst = rig.target->region(0).base;
  for (uint64_t i = 0; i < 32; ++i) {
    auto b = (*second)->submit({WriteOp{rig.init.src.addr(), dst, 8}});
    REQUIRE(b);
    REQUIRE((*b)->wait(10s));
    CHECK((*b)->status().ok() == !fault_injects(fault_session_seed(9, 1), i, 0.5));
  }
}
