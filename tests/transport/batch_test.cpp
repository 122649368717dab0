#include <catch2/catch.hpp>

#include "epd/transport/batch.hpp"

using namespace epd::transport;
using namespace std::chrono_literals;

TEST_CASE("batch completes after its last part", "[batch]") {
  auto counters = std::make_shared<BatchCounters>();
  Batch b(7, 2, 100, counters);
  CHECK(b.id() == 7);
  CHECK(b.poll() == Batch::State::pending);
  CHECK_FALSE(b.wait(1ms));
  b.add_parts(1);
  b.part_done();
  b.part_done();
  CHECK(b.poll() == Batch::State::pending);
  b.part_done();
  CHECK(b.poll() == Batch::State::done);
  CHECK(b.wait(0ms));
  CHECK(b.status().ok());
  CHECK(counters->submitted == 1);
  CHECK(counters->ok == 1);
  CHECK(counters->bytes_ok == 100);
}

TEST_CASE("batch failure wins and is reported once", "[batch]") {
  auto counters = std::make_shared<BatchCounters>();
  Batch b(1, 2, 10, counters);
  int calls = 0;
  b.on_complete([&](const Status& st) {
    ++calls;
    CHECK_FALSE(st.ok());
    CHECK(st.error().code == ErrorCode::peer_died);
  });
  b.part_done();
  b.fail(make_error(ErrorCode::peer_died, "gone"));
  b.fail(make_error(ErrorCode::timeout, "later"));
  b.part_done();  // ignored
  CHECK(calls == 1);
  CHECK(b.poll() == Batch::State::failed);
  CHECK(b.status().error().code == ErrorCode::peer_died);
  CHECK(b.status().error().retryable);
  CHECK(counters->failed == 1);
  CHECK(counters->ok == 0);
}

TEST_CASE("callback registered after completion runs at once", "[batch]") {
  Batch b(1, 0, 0);  // nothing to move: done immediately
  CHECK(b.finished());
  bool ran = false;
  b.on_complete([&](const Status& st) { ran = st.ok(); });
  CHECK(ran);
}
