#include <httplib.h>
#include <catch2/catch.hpp>

#include <thread>

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
  HostPort nobody;
  nobody.host = "127.0.0.1";
  nobody.port = 1;
  auto r = probe_instances(nobody, {"router"}, std::chrono::milliseconds(300));
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

// A router with API keys lets the probe in with one of them (the launcher reads its api_keys_file); any
// other answer to a key is a refusal the launcher reports at once, naming the cause, not "not ready".
TEST_CASE("readiness probe of a router that requires an API key", "[launcher][unit]") {
  httplib::Server server;
  server.Get("/v1/instances", [](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer the-operators-key-1234") {
      res.status = 401;
      return;
    }
    res.set_content(R"([{"id":"router","healthy":true}])", "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread serving([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  HostPort router;
  router.host = "127.0.0.1";
  router.port = uint16_t(port);
  const auto timeout = std::chrono::milliseconds(2000);

  auto open = probe_instances(router, {"router"}, timeout);
  CHECK_FALSE(open.answered);
  CHECK(open.refused);
  CHECK(open.error.find("HTTP 401") != std::string::npos);
  CHECK(open.error.find("has no api_keys_file") != std::string::npos);

  router.api_key = "another-key-5678-abcdef";
  auto wrong = probe_instances(router, {"router"}, timeout);
  CHECK(wrong.refused);
  CHECK(wrong.error.find("refused the first key of its own api_keys_file") != std::string::npos);
  CHECK(wrong.error.find("another-key") == std::string::npos);  // a key never goes into a message

  test::TempDir dir;
  auto keys = dir.write("keys.txt", "# the operator's\n\n  the-operators-key-1234  \nsecond-key-abcdefgh\n");
  auto key = first_api_key(keys);
  REQUIRE(key.ok());
  router.api_key = *key;
  auto in = probe_instances(router, {"router"}, timeout);
  CHECK(in.ready());
  CHECK_FALSE(in.refused);
  CHECK_FALSE(first_api_key(dir.write("empty.txt", "# none\n")).ok());
  CHECK_FALSE(first_api_key(dir.path / "absent.txt").ok());
  server.stop();
  serving.join();
}
