// API keys at the front door: the keys file, the constant-time check, and the 401s of every keyed route
// (health probes and the dashboard's files stay open).
#include "epd/http/api_keys.hpp"

#include "test_server.hpp"
#include "test_tls.hpp"

using namespace epd::http;
using namespace epd::http::test;
using nlohmann::json;

namespace {

constexpr const char* kKey = "sk-test-0123456789abcdef";
constexpr const char* kOtherKey = "sk-other-fedcba9876543210";

HttpApiConfig keyed_config() {
  auto c = small_config();
  auto keys = ApiKeys::from_text(std::string("# test keys\n") + kKey + "\n\n" + kOtherKey + "\n", "test");
  REQUIRE(keys.ok());
  c.api_keys = std::make_shared<const ApiKeys>(std::move(*keys));
  return c;
}

httplib::Headers bearer(const std::string& key) {
  return {{"Authorization", "Bearer " + key}};
}

// 401 in OpenAI's error shape with code invalid_api_key and a Bearer challenge; the key never echoed.
void check_unauthorized(const httplib::Result& res, std::string_view what, const std::string& sent = "") {
  REQUIRE(res);
  INFO("body: " << res->body);
  CHECK(res->status == 401);
  CHECK(res->get_header_value("Content-Type") == "application/json");
  CHECK(res->get_header_value("WWW-Authenticate").starts_with("Bearer realm=\"epd\""));
  auto j = json::parse(res->body);
  REQUIRE(j.size() == 1);
  const auto& e = j["error"];
  CHECK(e.size() == 4);
  CHECK(e["type"] == "invalid_request_error");
  CHECK(e["code"] == "invalid_api_key");
  CHECK(e["param"].is_null());
  CHECK(e["message"].get<std::string>().find(what) != std::string::npos);
  if (!sent.empty()) CHECK(res->body.find(sent) == std::string::npos);
}

}  // namespace

TEST_CASE("api keys: the file's keys are accepted and nothing else", "[http][api_keys]") {
  auto keys = ApiKeys::from_text(
      "# comment\n\n  sk-aaaaaaaaaaaaaaaa  \r\nsk-bbbbbbbbbbbbbbbb\n   # indented comment\n", "test");
  REQUIRE(keys.ok());
  CHECK(keys->size() == 2);
  CHECK(keys->accepts("sk-aaaaaaaaaaaaaaaa"));  // surrounding blanks and CR are not part of a key
  CHECK(keys->accepts("sk-bbbbbbbbbbbbbbbb"));
  CHECK_FALSE(keys->accepts(""));
  CHECK_FALSE(keys->accepts("sk-aaaaaaaaaaaaaaa"));    // a prefix
  CHECK_FALSE(keys->accepts("sk-aaaaaaaaaaaaaaaab"));  // longer
  CHECK_FALSE(keys->accepts("sk-aaaaaaaaaaaaaaab"));   // the last character differs
  CHECK_FALSE(keys->accepts("tk-aaaaaaaaaaaaaaaa"));   // the first differs
  CHECK_FALSE(keys->accepts("# comment"));
  CHECK_FALSE(keys->accepts(std::string(1000, 'a')));
}

TEST_CASE("api keys: a bad keys text is refused with the line and never the key", "[http][api_keys]") {
  auto short_key = ApiKeys::from_text("sk-aaaaaaaaaaaaaaaa\nshort-secret\n", "keys.txt");
  REQUIRE_FALSE(short_key.ok());
  CHECK(short_key.error().code == epd::protocol::ErrorCode::config_error);
  CHECK(short_key.error().detail.find("keys.txt: line 2") != std::string::npos);
  CHECK(short_key.error().detail.find("at least 16") != std::string::npos);
  CHECK(short_key.error().detail.find("short-secret") == std::string::npos);

  auto spaced = ApiKeys::from_text("sk-aaaaaaa aaaaaaaaa\n", "keys.txt");
  REQUIRE_FALSE(spaced.ok());
  CHECK(spaced.error().detail.find("visible ASCII") != std::string::npos);

  auto too_long = ApiKeys::from_text(std::string(300, 'k'), "keys.txt");
  REQUIRE_FALSE(too_long.ok());
  CHECK(too_long.error().detail.find("longer than 256") != std::string::npos);

  auto none = ApiKeys::from_text("# only a comment\n\n", "keys.txt");
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().detail.find("holds no key") != std::string::npos);
}

TEST_CASE("api keys: the keys file must exist hold keys and be private", "[http][api_keys]") {
  TempDir dir;
  auto good = dir.write("keys.txt", std::string(kKey) + "\n");
  auto loaded = ApiKeys::load(good);
  REQUIRE(loaded.ok());
  CHECK(loaded->accepts(kKey));

  auto missing = ApiKeys::load(dir.path / "nope.txt");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == epd::protocol::ErrorCode::config_error);
  CHECK(missing.error().detail.find("nope.txt") != std::string::npos);

  auto empty = ApiKeys::load(dir.write("empty.txt", ""));
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().detail.find("empty.txt") != std::string::npos);

  using std::filesystem::perms;
  auto world = ApiKeys::load(dir.write("world.txt", std::string(kKey) + "\n",
                                       perms::owner_read | perms::owner_write | perms::others_read));
  REQUIRE_FALSE(world.ok());
  CHECK(world.error().detail.find("world.txt") != std::string::npos);
  CHECK(world.error().detail.find("every user") != std::string::npos);

  // Group-readable is allowed (a service group may share the file).
  CHECK(ApiKeys::load(dir.write("group.txt", std::string(kKey) + "\n",
                                perms::owner_read | perms::owner_write | perms::group_read))
            .ok());
}

TEST_CASE("api keys: a request without a key gets 401 in OpenAI's error shape", "[http][api_keys]") {
  TestServer server(keyed_config());
  auto cli = server.client();
  check_unauthorized(cli.Get("/v1/models"), "You didn't provide an API key");
  check_unauthorized(cli.Post("/v1/chat/completions", R"({"messages":[]})", "application/json"),
                     "You didn't provide an API key");
  auto head = cli.Head("/v1/instances");
  REQUIRE(head);
  CHECK(head->status == 401);
  CHECK(server.service.generate_calls == 0);
  CHECK(server.api.unauthorized() == 3);
}

TEST_CASE("api keys: a wrong or malformed key gets 401 and is not echoed", "[http][api_keys]") {
  TestServer server(keyed_config());
  auto cli = server.client();
  const std::string wrong = "sk-wrong-0123456789abcdef";
  check_unauthorized(cli.Get("/v1/models", bearer(wrong)), "Incorrect API key", wrong);
  check_unauthorized(cli.Post("/v1/generate", bearer(wrong), R"({"prompt":"hi"})", "application/json"),
                     "Incorrect API key", wrong);
  // The key without its scheme, another scheme, the scheme alone, a key with extra text after it.
  check_unauthorized(cli.Get("/v1/models", {{"Authorization", kKey}}), "must be \"Bearer YOUR_KEY\"", kKey);
  check_unauthorized(cli.Get("/v1/models", {{"Authorization", std::string("Basic ") + kKey}}),
                     "must be \"Bearer YOUR_KEY\"", kKey);
  check_unauthorized(cli.Get("/v1/models", {{"Authorization", "Bearer"}}), "must be \"Bearer YOUR_KEY\"");
  check_unauthorized(cli.Get("/v1/models", {{"Authorization", "Bearer    "}}), "must be \"Bearer YOUR_KEY\"");
  check_unauthorized(cli.Get("/v1/models", {{"Authorization", std::string("Bearer ") + kKey + " x"}}),
                     "Incorrect API key");
  auto res = cli.Get("/v1/models", bearer(wrong));
  REQUIRE(res);
  CHECK(res->get_header_value("WWW-Authenticate") == R"(Bearer realm="epd", error="invalid_token")");
  CHECK(server.service.generate_calls == 0);
  CHECK(server.api.unauthorized() == 8);
}

TEST_CASE("api keys: a refused upload is answered before its body is read", "[http][api_keys]") {
  TestServer server(keyed_config());
  auto cli = server.client();
  // Over max_prompt_bytes: had the body been read and parsed first, the answer would be 413.
  const std::string body = R"({"prompt":")" + std::string(32 * 1024, 'a') + R"("})";
  auto res = cli.Post("/v1/generate", body, "application/json");
  REQUIRE(res);
  CHECK(res->status == 401);
  CHECK(server.service.generate_calls == 0);
}

TEST_CASE("api keys: health probes and the dashboard's files need no key", "[http][api_keys]") {
  TestServer server(keyed_config());
  auto cli = server.client();
  for (const char* path : {"/health", "/health/live", "/health/ready", "/", "/dashboard/dashboard.js"}) {
    INFO(path);
    auto res = cli.Get(path);
    REQUIRE(res);
    CHECK(res->status == 200);
  }
  CHECK(server.api.unauthorized() == 0);
}

TEST_CASE("api keys: either right key passes on every API route", "[http][api_keys]") {
  TestServer server(keyed_config());
  auto cli = server.client();
  for (const char* key : {kKey, kOtherKey}) {
    for (const char* path : {"/v1/models", "/v1/instances", "/v1/stats", "/v1/activity"}) {
      INFO(path);
      auto res = cli.Get(path, bearer(key));
      REQUIRE(res);
      CHECK(res->status == 200);
    }
    auto gen = cli.Post("/v1/generate", bearer(key), R"({"prompt":"hi","max_tokens":2})", "application/json");
    REQUIRE(gen);
    CHECK(gen->status == 200);
    auto comp =
        cli.Post("/v1/completions", bearer(key), R"({"prompt":"hi","max_tokens":2})", "application/json");
    REQUIRE(comp);
    CHECK(comp->status == 200);
    // The scheme is case-insensitive (RFC 7235).
    auto chat =
        cli.Post("/v1/chat/completions", {{"Authorization", std::string("bearer ") + key}},
                 R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})", "application/json");
    REQUIRE(chat);
    CHECK(chat->status == 200);
    // Anthropic's clients send X-Api-Key.
    auto messages =
        cli.Post("/v1/messages", {{"X-Api-Key", key}},
                 R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})", "application/json");
    REQUIRE(messages);
    CHECK(messages->status == 200);
  }
  CHECK(server.service.generate_calls == 8);
  CHECK(server.api.unauthorized() == 0);
}

TEST_CASE("api keys: a wrong X-Api-Key gets 401, in Anthropic's shape on its routes", "[http][api_keys]") {
  TestServer server(keyed_config());
  auto cli = server.client();
  const std::string wrong = "sk-wrong-0123456789abcdef";
  check_unauthorized(cli.Get("/v1/models", {{"X-Api-Key", wrong}}), "Incorrect API key", wrong);
  auto res = cli.Post("/v1/messages", {{"X-Api-Key", wrong}}, R"({"max_tokens":2})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 401);
  const auto body = nlohmann::json::parse(res->body);
  CHECK(body["type"] == "error");
  CHECK(body["error"]["type"] == "authentication_error");
  CHECK(res->body.find(wrong) == std::string::npos);
  CHECK(server.service.generate_calls == 0);
  CHECK(server.api.unauthorized() == 2);
}

TEST_CASE("api keys: without keys configured every route stays open", "[http][api_keys]") {
  TestServer server;
  auto res = server.client().Get("/v1/models");
  REQUIRE(res);
  CHECK(res->status == 200);
}

TEST_CASE(
    "api keys: an address that keeps failing gets 429 with Retry-After and then even the right key waits",
    "[http][api_keys]") {
  auto c = keyed_config();
  c.auth_throttle.max_failures = 3;
  c.auth_throttle.cooldown = std::chrono::seconds(30);
  TestServer server(c);
  auto cli = server.client();
  for (int i = 0; i < 3; ++i)
    check_unauthorized(cli.Get("/v1/models", bearer("sk-guess-000000000000" + std::to_string(i))),
                       "Incorrect API key");
  auto held = cli.Get("/v1/models", bearer(kKey));
  REQUIRE(held);
  INFO(held->body);
  CHECK(held->status == 429);
  const int retry = std::stoi(held->get_header_value("Retry-After"));
  CHECK(retry >= 1);
  CHECK(retry <= 30);
  CHECK(json::parse(held->body)["error"]["code"] == "rate_limited");
  CHECK(cli.Get("/health/live")->status == 200);  // open routes are not throttled
  CHECK(server.api.unauthorized() == 3);
  CHECK(server.api.auth_throttled() == 1);
}
