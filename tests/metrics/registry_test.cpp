#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

#include "epd/metrics/buckets.hpp"
#include "epd/metrics/registry.hpp"

using namespace epd::metrics;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

}  // namespace

TEST_CASE("families carry the constant labels and render in the text format", "[metrics]") {
  Registry r(Labels{{"instance_id", "prefill-0"}, {"role", "prefill"}});
  r.counter("epd_things_total", "Things").Add({{"code", "timeout"}}).Increment(3);
  r.gauge("epd_level", "Level").Add({}).Set(7);
  const std::string text = r.render();
  INFO(text);
  CHECK(has_line(text, "# HELP epd_things_total Things"));
  CHECK(has_line(text, "# TYPE epd_things_total counter"));
  CHECK(has_line(text, "epd_things_total{instance_id=\"prefill-0\",role=\"prefill\",code=\"timeout\"} 3"));
  CHECK(has_line(text, "epd_level{instance_id=\"prefill-0\",role=\"prefill\"} 7"));
}

TEST_CASE("asking for a family again returns the same family", "[metrics]") {
  Registry r;
  auto& a = r.counter("epd_x_total", "X");
  auto& b = r.counter("epd_x_total", "X");
  CHECK(&a == &b);
  a.Add({}).Increment();
  b.Add({}).Increment();
  CHECK(has_line(r.render(), "epd_x_total 2"));
}

TEST_CASE("a histogram renders cumulative buckets with the shared layout", "[metrics]") {
  Registry r(Labels{{"role", "router"}});
  auto& h = r.histogram("epd_wait_seconds", "Wait").Add({}, latency_seconds_buckets());
  h.Observe(0.0002);
  h.Observe(0.003);
  h.Observe(100);  // beyond the last bucket: only +Inf
  const std::string text = r.render();
  INFO(text);
  CHECK(has_line(text, "epd_wait_seconds_count{role=\"router\"} 3"));
  CHECK(has_line(text, "epd_wait_seconds_bucket{role=\"router\",le=\"0.00025\"} 1"));
  CHECK(has_line(text, "epd_wait_seconds_bucket{role=\"router\",le=\"0.005\"} 2"));
  CHECK(has_line(text, "epd_wait_seconds_bucket{role=\"router\",le=\"60\"} 2"));
  CHECK(has_line(text, "epd_wait_seconds_bucket{role=\"router\",le=\"+Inf\"} 3"));
}

TEST_CASE("scrape-time collectors sample on every render with the constant labels", "[metrics]") {
  Registry r(Labels{{"role", "decode"}});
  int free_pages = 10;
  r.on_scrape([&](Snapshot& s) {
    s.gauge("epd_pages_free", "Free", free_pages);
    s.counter("epd_done_total", "Done", 4, {{"kind", "a"}});
    s.counter("epd_done_total", "Done", 5, {{"kind", "b"}});
  });
  CHECK(has_line(r.render(), "epd_pages_free{role=\"decode\"} 10"));
  free_pages = 3;
  const std::string text = r.render();
  INFO(text);
  CHECK(has_line(text, "epd_pages_free{role=\"decode\"} 3"));
  // Two samples of one family: one HELP/TYPE header, both samples.
  CHECK(text.find("# TYPE epd_done_total counter") == text.rfind("# TYPE epd_done_total counter"));
  CHECK(has_line(text, "epd_done_total{kind=\"a\",role=\"decode\"} 4"));
  CHECK(has_line(text, "epd_done_total{kind=\"b\",role=\"decode\"} 5"));
}

TEST_CASE("a collector sampling one name with two types is a bug and says so", "[metrics]") {
  Registry r;
  r.on_scrape([](Snapshot& s) {
    s.gauge("epd_confused", "C", 1);
    s.counter("epd_confused", "C", 1);
  });
  CHECK_THROWS_AS(r.render(), std::logic_error);
}

TEST_CASE("bucket layouts ascend and cover their ranges", "[metrics]") {
  for (const auto* b : {&latency_seconds_buckets(), &transfer_seconds_buckets(), &size_bytes_buckets()}) {
    REQUIRE(b->size() > 5);
    for (size_t i = 1; i < b->size(); ++i) CHECK((*b)[i] > (*b)[i - 1]);
  }
  CHECK(latency_seconds_buckets().front() == Approx(1e-4));
  CHECK(latency_seconds_buckets().back() == 60);
  CHECK(transfer_seconds_buckets().front() == Approx(1e-5));
  CHECK(size_bytes_buckets().back() == double(1ull << 30));
}
