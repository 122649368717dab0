#include <catch2/catch.hpp>

#include "epd/launcher/readiness.hpp"
#include "epd/launcher/role_command.hpp"
#include "test_util.hpp"

using namespace epd::launcher;

TEST_CASE("host:port of the router's http setting", "[launcher][unit]") {
  auto a = parse_host_port("127.0.0.1:18100");
  REQUIRE(a.ok());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 18100);
  auto b = parse_host_port("http://localhost:80");
  REQUIRE(b.ok());
  CHECK(b->host == "localhost");
  CHECK_FALSE(parse_host_port("127.0.0.1").ok());
  CHECK_FALSE(parse_host_port("127.0.0.1:0").ok());
  CHECK_FALSE(parse_host_port("127.0.0.1:70000").ok());
  CHECK_FALSE(parse_host_port("127.0.0.1:12ab").ok());
  CHECK_FALSE(parse_host_port(":80").ok());
}

TEST_CASE("readiness needs every expected id listed as healthy", "[launcher][unit]") {
  std::vector<std::string> ids{"router", "prefill-0", "decode-0"};
  auto r = evaluate_instances(R"([{"id":"router","healthy":true},{"id":"prefill-0","healthy":false},
                                  {"id":"other","healthy":true},{"id":"decode-0"}])",
                              ids);
  CHECK(r.answered);
  CHECK_FALSE(r.ready());
  CHECK(r.missing == std::vector<std::string>{"prefill-0", "decode-0"});

  auto all = evaluate_instances(
      R"({"instances":[{"id":"router","healthy":true,"free_kv_pages":3},{"id":"prefill-0","healthy":true},
                       {"id":"decode-0","healthy":true}]})",
      ids);
  CHECK(all.ready());

  auto bad = evaluate_instances("not json", ids);
  CHECK_FALSE(bad.answered);
  CHECK_FALSE(bad.error.empty());
  CHECK(bad.missing == ids);
}

TEST_CASE("readiness probe of an unreachable router says so", "[launcher][unit]") {
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  auto r = probe_instances({"127.0.0.1", 1}, {"router"}, std::chrono::milliseconds(300));
  CHECK_FALSE(r.answered);
  CHECK(r.error.find("not answering") != std::string::npos);
}

TEST_CASE("role command prefers epd-<role>, falls back to epd-role, else names both", "[launcher][unit]") {
  test::TempDir dir;
  auto cfg = dir.path / "c.toml";
  auto none = role_command(dir.path, "prefill", cfg, "prefill-0");
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().detail.find("epd-prefill") != std::string::npos);
  CHECK(none.error().detail.find("epd-role") != std::string::npos);

  dir.write("epd-role", "#!/bin/sh\n", true);
  auto generic = role_command(dir.path, "prefill", cfg, "prefill-0");
  REQUIRE(generic.ok());
  CHECK(*generic == std::vector<std::string>{(dir.path / "epd-role").string(), "--role", "prefill",
                                             "--config", cfg.string(), "--id", "prefill-0"});

  dir.write("epd-prefill", "#!/bin/sh\n", false);  // present but not executable: not used
  CHECK((*role_command(dir.path, "prefill", cfg, "prefill-0"))[0] == (dir.path / "epd-role").string());
  dir.write("epd-prefill", "#!/bin/sh\n", true);
  auto own = role_command(dir.path, "prefill", cfg, "prefill-0");
  REQUIRE(own.ok());
  CHECK(*own == std::vector<std::string>{(dir.path / "epd-prefill").string(), "--config", cfg.string(),
                                         "--id", "prefill-0"});
}
