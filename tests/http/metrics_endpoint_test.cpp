#include <httplib.h>

#include <catch2/catch.hpp>
#include <stdexcept>

#include "epd/http/metrics_endpoint.hpp"
#include "test_tls.hpp"

using epd::http::ApiKeys;
using epd::http::MetricsAccess;
using epd::http::MetricsEndpoint;
using epd::http::TlsFiles;
using namespace epd::http::test;

TEST_CASE("GET /metrics serves the rendered text with Prometheus's content type", "[metrics]") {
  int renders = 0;
  MetricsEndpoint ep([&] { return "epd_up " + std::to_string(++renders) + "\n"; });
  auto port = ep.start("127.0.0.1", 0);
  REQUIRE(port.ok());
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "epd_up 1\n");
  CHECK(r->get_header_value("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(c.Get("/metrics")->body == "epd_up 2\n");  // rendered per scrape
  auto other = c.Get("/v1/models");
  REQUIRE(other);
  CHECK(other->status == 404);
  auto post = c.Post("/metrics", "x", "text/plain");
  REQUIRE(post);
  CHECK(post->status == 405);
  CHECK(post->get_header_value("Allow") == "GET, HEAD");
  ep.stop();
  CHECK_FALSE(httplib::Client("127.0.0.1", *port).Get("/metrics"));
}

TEST_CASE("a render that throws answers 500 and the endpoint keeps serving", "[metrics]") {
  bool fail = true;
  MetricsEndpoint ep([&]() -> std::string {
    if (fail) throw std::runtime_error("collector broke");
    return "ok\n";
  });
  auto port = ep.start("127.0.0.1", 0);
  REQUIRE(port.ok());
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/metrics");
  REQUIRE(r);
  CHECK(r->status == 500);
  CHECK(r->body.find("collector broke") != std::string::npos);
  fail = false;
  CHECK(c.Get("/metrics")->status == 200);
}

TEST_CASE("an address already taken is an error naming it", "[metrics]") {
  MetricsEndpoint a([] { return std::string(); });
  auto port = a.start("127.0.0.1", 0);
  REQUIRE(port.ok());
  MetricsEndpoint b([] { return std::string(); });
  auto again = b.start("127.0.0.1", *port);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().detail.find(std::to_string(*port)) != std::string::npos);
}

TEST_CASE("with scrape keys over TLS: curl with the CA and a key scrapes and without a key gets 401",
          "[metrics]") {
  TempDir dir;
  const auto certs = make_test_certs(dir.path);
  const std::string key = "scrape-key-0123456789abcdef";
  auto keys = ApiKeys::from_text(key, "test");
  REQUIRE(keys.ok());
  MetricsEndpoint ep(
      [] { return std::string("epd_up 1\n"); },
      MetricsAccess{std::make_shared<const ApiKeys>(std::move(*keys)), TlsFiles{certs.cert, certs.key}});
  auto port = ep.start("127.0.0.1", 0);
  REQUIRE(port.ok());
  CHECK(ep.tls());
  const std::string base = "curl -sS --max-time 5 -w '\\n%{http_code}' --cacert " + certs.ca.string() + " ";
  const std::string url = " https://127.0.0.1:" + std::to_string(*port);
  auto ok = run_command(base + "-H 'Authorization: Bearer " + key + "'" + url + "/metrics 2>&1");
  INFO(ok.output);
  CHECK(ok.output == "epd_up 1\n\n200");

  auto missing = run_command(base + "-D -" + url + "/metrics 2>&1");
  INFO(missing.output);
  CHECK(missing.output.ends_with("\n401"));
  CHECK(missing.output.find("WWW-Authenticate: Bearer") != std::string::npos);
  CHECK(missing.output.find("epd_up") == std::string::npos);
  auto wrong = run_command(base + "-H 'Authorization: Bearer " + key + "x'" + url + "/metrics 2>&1");
  CHECK(wrong.output.ends_with("\n401"));
  // The key is asked for before anything else: a stranger cannot even learn which paths exist.
  auto probe = run_command(base + url + "/nothing-here 2>&1");
  CHECK(probe.output.ends_with("\n401"));
  CHECK(ep.unauthorized() == 3);

  auto plain =
      run_command("curl -sS --max-time 5 http://127.0.0.1:" + std::to_string(*port) + "/metrics 2>&1");
  CHECK(plain.output.find("epd_up") == std::string::npos);  // plain HTTP gets nothing
  auto unverified =
      run_command("curl -sS --max-time 5 -H 'Authorization: Bearer " + key + "'" + url + "/metrics 2>&1");
  CHECK(unverified.output.find("epd_up") == std::string::npos);  // an unknown CA is not trusted
}
