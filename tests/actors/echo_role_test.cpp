// The worked example role (echo) under CAF's test coordinator, spawned from its RoleSpec with its settings
// read from a config: the whole recipe of docs/adding-a-role.md, end to end, without sockets.
#include <catch2/catch.hpp>

#include "epd/actors/role_registry.hpp"
#include "epd/config/cluster_config.hpp"
#include "role_harness.hpp"

using namespace epd;
using namespace epd::actors;

namespace {

TEST_CASE("echo: SUBMIT -> RESULT with the prompt reversed, cut to max_tokens, settings checked") {
  test::Harness h;
  auto cfg = config::parse_cluster_config(R"(
[cluster]
registry = "echo-0"
[[instance]]
id = "echo-0"
role = "echo"
control = "tcp://127.0.0.1:17993"
max_tokens = 3
)",
                                          "echo_role_test.toml");
  REQUIRE(cfg.ok());
  auto bridge = h.offline_bridge("echo-0", 1);
  RoleContext ctx;
  ctx.system = &h.system();
  ctx.cluster = &cfg.value();
  ctx.instance = cfg->find("echo-0");
  ctx.bridge = bridge;
  (void)bridge->peers().replace(1, {test::peer("router", "router", 9)});
  const RoleSpec* spec = builtin_roles().find("echo");
  REQUIRE(spec);
  CHECK(spec->settings == std::vector<std::string_view>{"max_tokens"});
  auto handle = spec->spawn(ctx);
  REQUIRE(handle.ok());
  h.keep(handle->main);
  h.run();

  protocol::Submit s;
  s.room = 4;
  s.prompt = {1, 2, 3, 4, 5};
  test::deliver(*bridge, "router", 9, s);
  h.run();
  auto out = test::sent(*bridge);
  REQUIRE(out.size() == 1);
  CHECK_FALSE(out[0].reply);
  CHECK(out[0].to == "offline://router");
  const auto* r = out[0].as<protocol::RoomResult>();
  REQUIRE(r);
  CHECK(r->ok);
  CHECK(r->room == 4);
  CHECK(r->tokens == std::vector<uint32_t>{5, 4, 3});

  // A role that declares no handler for a type never sees it.
  test::deliver(*bridge, "router", 9, protocol::Cancel{4, "x"});
  h.run();
  auto err = test::sent(*bridge);
  REQUIRE(err.size() == 1);
  REQUIRE(err[0].as<protocol::ErrorReply>());
  CHECK(err[0].as<protocol::ErrorReply>()->code == protocol::ErrorCode::unexpected_message);

  // An out-of-bounds setting is refused at spawn, naming the key.
  auto bad = config::parse_cluster_config(R"(
[cluster]
registry = "echo-0"
[[instance]]
id = "echo-0"
role = "echo"
control = "tcp://127.0.0.1:17993"
max_tokens = 0
)",
                                          "echo_role_test.toml");
  REQUIRE(bad.ok());
  RoleContext bad_ctx = ctx;
  bad_ctx.cluster = &bad.value();
  bad_ctx.instance = bad->find("echo-0");
  auto refused = spec->spawn(bad_ctx);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().detail, Catch::Contains("'max_tokens'"));
}

}  // namespace
