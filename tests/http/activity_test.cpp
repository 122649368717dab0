// GET /v1/activity: the ring of finished requests on its own (bounded, newest first, clipped messages, safe
// from many threads) and through the HTTP API with a fake router (what each route records, what it does not).
#include <set>
#include <thread>

#include "epd/http/activity_log.hpp"
#include "test_server.hpp"

using namespace epd::http;
using namespace epd::http::test;
using nlohmann::json;

namespace {

constexpr const char* kActivityJson = "application/json";

ActivityEntry entry(std::string id, uint32_t tokens = 1) {
  ActivityEntry e;
  e.request_id = std::move(id);
  e.route = "/v1/completions";
  e.completion_tokens = tokens;
  return e;
}

json activity(TestServer& server) {
  auto res = server.client().Get("/v1/activity");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == kActivityJson);
  return json::parse(res->body);
}

}  // namespace

TEST_CASE("activity log: bounded, newest first, totals over everything recorded", "[http][activity]") {
  ActivityLog log(4);
  const auto before = std::chrono::system_clock::now();
  for (int i = 1; i <= 6; ++i) log.record(entry("r" + std::to_string(i), uint32_t(i)));
  const auto s = log.snapshot();
  CHECK(s.recorded == 6);
  CHECK(s.completion_tokens == 1 + 2 + 3 + 4 + 5 + 6);  // also those already dropped from the ring
  CHECK(s.capacity == 4);
  REQUIRE(s.entries.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(s.entries[i].seq == 6 - i);
    CHECK(s.entries[i].request_id == "r" + std::to_string(6 - i));
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(before.time_since_epoch()).count();
  CHECK(s.entries[0].finished_unix_ms >= ms);
  CHECK(s.entries[0].finished_unix_ms < ms + 60'000);

  ActivityLog none(0);  // keeps nothing, still counts
  none.record(entry("x", 5));
  CHECK(none.snapshot().entries.empty());
  CHECK(none.snapshot().recorded == 1);
  CHECK(none.snapshot().completion_tokens == 5);
}

TEST_CASE("activity log: a long error message is clipped at a character boundary", "[http][activity]") {
  ActivityLog log(2);
  auto e = entry("long");
  e.error_code = "invalid_request";
  e.error = std::string(ActivityLog::kMaxErrorBytes - 1, 'a') + "\xC3\xA9" + std::string(500, 'b');  // é
  log.record(e);
  const std::string got = log.snapshot().entries.at(0).error;
  CHECK(got == std::string(ActivityLog::kMaxErrorBytes - 1, 'a') + "...");  // é would straddle the limit
  e.error = "short";
  log.record(e);
  CHECK(log.snapshot().entries.at(0).error == "short");
}

TEST_CASE("activity log: 8 threads recording at once lose nothing and keep the order", "[http][activity]") {
  ActivityLog log(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) log.record(entry(std::to_string(t) + "-" + std::to_string(i)));
    });
  for (auto& t : threads) t.join();
  const auto s = log.snapshot();
  CHECK(s.recorded == 4000);
  CHECK(s.completion_tokens == 4000);
  REQUIRE(s.entries.size() == 64);
  for (size_t i = 0; i < s.entries.size(); ++i) CHECK(s.entries[i].seq == 4000 - i);
}

TEST_CASE("GET /v1/activity lists the answers and failures of every generation route", "[http][activity]") {
  auto config = small_config();
  config.activity_entries = 3;
  TestServer server(config, [](FakeRouterService& s) {
    s.on_generate = [](const GenerateRequest& r) {
      if (r.prompt == "fail") {
        GenerateResponse bad;
        bad.http_status = 503;
        bad.error_code = "out_of_capacity";
        bad.error = "no free KV pages on any decode instance";
        bad.attempts = 3;
        return bad;
      }
      auto ok = FakeRouterService::echo(r);
      ok.prompt_tokens = 9;
      return ok;
    };
  });
  auto cli = server.client();
  CHECK(activity(server) ==
        json({{"recorded", 0}, {"completion_tokens", 0}, {"capacity", 3}, {"entries", json::array()}}));

  httplib::Headers id = {{"X-Request-Id", "req-generate"}};
  REQUIRE(cli.Post("/v1/generate", id, R"({"prompt":"hello","max_tokens":4})", kActivityJson)->status == 200);
  id = {{"X-Request-Id", "req-stream"}};
  REQUIRE(cli.Post("/v1/completions", id, R"({"prompt":"abc","stream":true})", kActivityJson)->status == 200);
  id = {{"X-Request-Id", "req-chat"}};
  REQUIRE(
      cli.Post("/v1/chat/completions", id, R"({"messages":[{"role":"user","content":"x"}]})", kActivityJson)
          ->status == 200);  // the fake echoes `prompt`, empty for a chat: no tokens
  id = {{"X-Request-Id", "req-fail"}};
  auto res = cli.Post("/v1/completions", id, R"({"prompt":"fail"})", kActivityJson);
  REQUIRE(res->status == 503);

  auto j = activity(server);
  CHECK(j["recorded"] == 4);
  CHECK(j["capacity"] == 3);
  CHECK(j["completion_tokens"] == 4 + 3 + 0 + 0);
  const auto& e = j["entries"];
  REQUIRE(e.size() == 3);  // bounded: the first request is gone

  // Newest first: the failure, with the code and message its client got.
  CHECK(e[0]["seq"] == 4);
  CHECK(e[0]["request_id"] == "req-fail");
  CHECK(e[0]["route"] == "/v1/completions");
  CHECK(e[0]["stream"] == false);
  CHECK(e[0]["status"] == 503);
  CHECK(e[0]["error"] ==
        json({{"code", "out_of_capacity"}, {"message", "no free KV pages on any decode instance"}}));
  CHECK(e[0]["attempts"] == 3);
  CHECK(e[0]["completion_tokens"] == 0);

  CHECK(e[1]["seq"] == 3);
  CHECK(e[1]["request_id"] == "req-chat");
  CHECK(e[1]["route"] == "/v1/chat/completions");
  CHECK(e[1]["error"].is_null());

  CHECK(e[2]["seq"] == 2);
  CHECK(e[2]["request_id"] == "req-stream");
  CHECK(e[2]["route"] == "/v1/completions");
  CHECK(e[2]["stream"] == true);
  CHECK(e[2]["status"] == 200);
  CHECK(e[2]["error"].is_null());
  CHECK(e[2]["first_token_ms"] == 3.0);  // the router's timings
  CHECK(e[2]["total_ms"] == 11.0);
  CHECK(e[2]["prompt_tokens"] == 9);
  CHECK(e[2]["completion_tokens"] == 3);
  CHECK(e[2]["attempts"] == 1);
  CHECK(e[2]["finished_unix_ms"].get<int64_t>() >= e[0]["finished_unix_ms"].get<int64_t>() - 60'000);
  CHECK(e[0]["finished_unix_ms"] >= e[2]["finished_unix_ms"]);
}

TEST_CASE("GET /v1/activity: refusals of the HTTP layer are not there, a stop string is a success",
          "[http][activity]") {
  TestServer server(small_config(), [](FakeRouterService& s) {
    // The tokens, then (after the route's cancel) the router's answer to the cancel.
    s.drive = [](const GenerateRequest&, GenerationSink& sink) {
      const std::string text = "one STOP two";
      std::vector<uint32_t> tokens(text.begin(), text.end());
      sink.on_tokens(tokens);
      GenerateResponse cancelled;
      cancelled.http_status = 499;
      cancelled.error_code = "aborted";
      cancelled.error = "cancelled: a stop string ended the answer";
      cancelled.attempts = 1;
      sink.on_done(cancelled);
    };
  });
  auto cli = server.client();
  // Refused before the router: a bad body, an unknown model.
  REQUIRE(cli.Post("/v1/completions", R"({"prompt":""})", kActivityJson)->status == 400);
  REQUIRE(cli.Post("/v1/completions", R"({"prompt":"p","model":"gpt-9"})", kActivityJson)->status == 404);
  CHECK(activity(server)["recorded"] == 0);

  auto res = cli.Post("/v1/completions", R"({"prompt":"p","stop":["STOP"]})", kActivityJson);
  REQUIRE(res->status == 200);
  CHECK(json::parse(res->body)["choices"][0]["text"] == "one ");
  auto j = activity(server);
  REQUIRE(j["entries"].size() == 1);
  CHECK(j["entries"][0]["status"] == 200);
  CHECK(j["entries"][0]["error"].is_null());
}

TEST_CASE("GET /v1/activity: a failure after the stream started keeps its code", "[http][activity]") {
  TestServer server(small_config(), [](FakeRouterService& s) {
    s.drive = [](const GenerateRequest&, GenerationSink& sink) {
      sink.on_tokens(std::vector<uint32_t>{'h', 'i'});
      GenerateResponse r;
      r.http_status = 504;
      r.error_code = "timeout";
      r.error = "request timed out after 30000 ms";
      r.attempts = 2;
      r.timings.first_token_ms = 7.5;
      sink.on_done(r);
    };
  });
  auto res = server.client().Post(
      "/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"stream":true})", kActivityJson);
  REQUIRE(res->status == 200);  // the head went out with the first token
  CHECK(res->body.find("\"code\":\"timeout\"") != std::string::npos);
  auto e = activity(server)["entries"];
  REQUIRE(e.size() == 1);
  CHECK(e[0]["status"] == 504);
  CHECK(e[0]["error"]["code"] == "timeout");
  CHECK(e[0]["first_token_ms"] == 7.5);
  CHECK(e[0]["completion_tokens"] == 2);
  CHECK(e[0]["attempts"] == 2);
}
