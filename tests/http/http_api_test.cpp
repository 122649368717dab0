// HttpApi end to end over real sockets on 127.0.0.1, with a fake RouterService behind it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>

#include "epd/http/base64.hpp"
#include "test_server.hpp"

using namespace epd::http;
using namespace epd::http::test;
using nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

json json_body(const httplib::Result& res) {
  REQUIRE(res);
  CHECK(res->get_header_value("Content-Type") == kJson);
  return json::parse(res->body);
}

// The reply is an error with this status whose message contains `what`, in OpenAI's error shape:
// {"error": {"message", "type", "param", "code"}} with epd's error name as the code.
void check_error(const httplib::Result& res, int status, std::string_view what) {
  REQUIRE(res);
  INFO("body: " << res->body);
  CHECK(res->status == status);
  auto j = json_body(res);
  REQUIRE(j.size() == 1);
  const auto& e = j["error"];
  REQUIRE(e.is_object());
  CHECK(e.size() == 4);
  CHECK(e["code"].is_string());
  CHECK_FALSE(e["code"].get<std::string>().empty());
  CHECK(e["type"] == (status >= 500 ? "server_error" : "invalid_request_error"));
  CHECK(e["param"].is_null());  // /v1/generate's parser names no param
  CHECK(e["message"].get<std::string>().find(what) != std::string::npos);
}

std::string ppm_b64(size_t pixels) {
  std::string s = "P6\n" + std::to_string(pixels) + " 1\n255\n";
  s.append(pixels * 3, '\x10');
  return base64_encode({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

}  // namespace

TEST_CASE("POST /v1/generate answers with text, tokens, instances and stage timings", "[http]") {
  TestServer server;
  auto cli = server.client();
  auto res = cli.Post("/v1/generate", R"({"prompt":"hello","max_tokens":3})", kJson);
  REQUIRE(res);
  CHECK(res->status == 200);
  auto j = json_body(res);
  CHECK(j["text"] == "echo:hello");
  CHECK(j["tokens"] == json::array({'h', 'e', 'l'}));
  CHECK(j["room"].get<uint64_t>() == 0xfedcba9876543210ull);  // all 64 bits survive
  CHECK(j["attempts"] == 1);
  CHECK(j["instances"] == json({{"encoder", ""}, {"prefill", "prefill-0"}, {"decode", "decode-0"}}));
  CHECK(j["timings_ms"] == json({{"encode", 1.5},
                                 {"prefill", 2.5},
                                 {"kv_transfer", 0.25},
                                 {"first_token", 3.0},
                                 {"decode", 4.0},
                                 {"total", 11.0}}));
  CHECK(server.service.generate_calls == 1);
  CHECK(server.service.last_request().max_tokens == 3);

  // With an image; the decoded bytes reach the service.
  res = cli.Post("/v1/generate", json{{"prompt", "look"}, {"image", ppm_b64(4)}}.dump(), kJson);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json_body(res)["instances"]["encoder"] == "encoder-0");
  REQUIRE(server.service.last_request().media.size() == 1);
  auto image = server.service.last_request().media[0];
  CHECK(std::string(image.begin(), image.end()).starts_with("P6\n4 1\n255\n"));
  CHECK(image.size() == 11 + 12);

  // Default max_tokens; a Content-Type other than JSON is tolerated (curl -d sends form-urlencoded).
  res = cli.Post("/v1/generate", R"({"prompt":"x","unknown":[1]})", "application/x-www-form-urlencoded");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(server.service.last_request().max_tokens == 16);
}

TEST_CASE("the service's failures pass through with their status and an error body", "[http]") {
  std::atomic<int> mode{0};
  TestServer server(small_config(), [&](FakeRouterService& s) {
    s.on_generate = [&](const GenerateRequest&) {
      GenerateResponse r;
      if (mode == 0) {
        r.http_status = 503;
        r.error_code = "out_of_capacity";
        r.error = "no free KV pages on any decode instance";
      }
      if (mode == 1) r.http_status = 504;  // no code, no message
      if (mode == 2) r.http_status = 0;    // a router bug
      if (mode == 4) r.text = "bad utf-8: \xff\xfe";
      return r;
    };
  });
  auto cli = server.client();
  auto post = [&] { return cli.Post("/v1/generate", R"({"prompt":"p"})", kJson); };

  auto res = post();
  check_error(res, 503, "no free KV pages");
  CHECK(json_body(res)["error"]["code"] == "out_of_capacity");
  mode = 1;
  res = post();
  check_error(res, 504, "request failed (HTTP 504)");
  CHECK(json_body(res)["error"]["code"] == "internal");
  mode = 2;
  check_error(post(), 500, "router returned HTTP status 0");
  server.service.throw_in_generate = true;  // a bug in the service: the server answers, and keeps serving
  check_error(post(), 500, "boom");
  server.service.throw_in_generate = false;
  mode = 4;
  res = post();
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json_body(res)["text"] == "bad utf-8: \xef\xbf\xbd\xef\xbf\xbd");  // U+FFFD each
}

TEST_CASE("bad generate requests get 4xx with a clear message and never reach the service", "[http]") {
  TestServer server;
  auto cli = server.client();
  struct Case {
    std::string body;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"{\"prompt\": \"hi\",", 400, "invalid JSON: parse error at line 1, column"},
      {"", 400, "invalid JSON"},
      {"[\"prompt\"]", 400, "must be a JSON object"},
      {"{}", 400, "\"prompt\" is required"},
      {R"({"prompt":42})", 400, "\"prompt\" must be a string"},
      {R"({"prompt":""})", 400, "must not be empty"},
      {json{{"prompt", std::string(1025, 'a')}}.dump(), 413, "the limit is 1024 bytes"},
      {std::string(40000, '['), 400, "nested deeper"},
      {R"({"prompt":"p","max_tokens":"8"})", 400, "must be an integer in 1..64"},
      {R"({"prompt":"p","max_tokens":0})", 400, "must be in 1..64"},
      {R"({"prompt":"p","max_tokens":65})", 400, "must be in 1..64"},
      {R"({"prompt":"p","max_tokens":-3})", 400, "must be in 1..64"},
      {R"({"prompt":"p","image":true})", 400, "\"image\" must be a base64 string"},
      {R"({"prompt":"p","image":"not base64!"})", 400, "invalid base64"},
      {R"({"prompt":"p","image":"QUJDRA=="})", 400, "not a binary PPM"},
      {json{{"prompt", "p"}, {"image", ppm_b64(2000)}}.dump(), 413, "exceeds the limit of 4096 bytes"},
      {json{{"prompt", "p"}, {"pad", std::string(70000, ' ')}}.dump(), 413,
       "exceeds the limit of 65536 bytes"},
  };
  for (const auto& c : cases) {
    INFO("body: " << c.body.substr(0, 80));
    check_error(cli.Post("/v1/generate", c.body, kJson), c.status, c.says);
  }
  CHECK(server.service.generate_calls == 0);
}

TEST_CASE("wrong methods get 405, unknown paths 404, compressed bodies 415, all as JSON", "[http]") {
  TestServer server;
  auto cli = server.client(GENERATE(false, true));

  auto res = cli.Get("/v1/generate");
  check_error(res, 405, "GET is not allowed on /v1/generate; use POST");
  CHECK(res->get_header_value("Allow") == "POST");
  res = cli.Post("/health", "{}", kJson);
  check_error(res, 405, "use GET");
  CHECK(res->get_header_value("Allow") == "GET, HEAD");
  check_error(cli.Put("/v1/generate", R"({"prompt":"p"})", kJson), 405, "PUT is not allowed");
  check_error(cli.Delete("/v1/instances"), 405, "DELETE is not allowed");
  check_error(cli.Options("/v1/stats"), 405, "OPTIONS is not allowed");

  check_error(cli.Get("/index.html"), 404, "no route for /index.html");  // the dashboard is at / only
  check_error(cli.Get("/v1/generate/"), 404,
              "POST /v1/generate, POST /v1/responses, POST /v1/messages, POST /v1/messages/count_tokens, GET "
              "/v1/models");
  check_error(cli.Get("/v2"), 404, "GET /v1/activity, POST /tokenize, POST /detokenize, GET /");
  check_error(cli.Post("/v2/generate", R"({"prompt":"p"})", kJson), 404, "no route for /v2/generate");

  httplib::Headers gzip = {{"Content-Encoding", "gzip"}};
  check_error(cli.Post("/v1/generate", gzip, "\x1f\x8b garbage", kJson), 415, "Content-Encoding \"gzip\"");

  // The server still answers correctly afterwards (a rejected body may have forced a reconnect).
  res = cli.Post("/v1/generate", R"({"prompt":"ok"})", kJson);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(server.service.generate_calls == 1);
}

TEST_CASE("the server keeps serving after 200 bad requests", "[http]") {
  TestServer server;
  auto keep = GENERATE(false, true);
  auto cli = server.client(keep);
  const std::string bad[] = {"{",
                             "[]",
                             "{}",
                             R"({"prompt":1})",
                             R"({"prompt":"p","image":"@@@@"})",
                             json{{"prompt", "p"}, {"x", std::string(70000, 'x')}}.dump()};
  for (int i = 0; i < 200; ++i) {
    auto res = cli.Post("/v1/generate", bad[i % std::size(bad)], kJson);
    REQUIRE(res);
    REQUIRE(res->status >= 400);
    REQUIRE(res->status < 500);
  }
  CHECK(server.service.generate_calls == 0);
  auto res = cli.Post("/v1/generate", R"({"prompt":"still here"})", kJson);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json_body(res)["text"] == "echo:still here");
}

TEST_CASE("requests are served concurrently", "[http]") {
  // Every call waits until 4 are inside generate() at once: only a concurrent server gets them through.
  std::mutex mu;
  std::condition_variable cv;
  int inside = 0;
  TestServer server(small_config(), [&](FakeRouterService& s) {
    s.on_generate = [&](const GenerateRequest& r) {
      std::unique_lock lock(mu);
      ++inside;
      cv.notify_all();
      bool together = cv.wait_for(lock, std::chrono::seconds(5), [&] { return inside >= 4; });
      auto out = FakeRouterService::echo(r);
      if (!together) out.text = "alone";
      return out;
    };
  });
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      auto cli = server.client();
      auto res = cli.Post("/v1/generate", json{{"prompt", "c" + std::to_string(t)}}.dump(), kJson);
      if (res && res->status == 200 && json::parse(res->body)["text"] == "echo:c" + std::to_string(t))
        ++answered;
    });
  }
  for (auto& c : clients) c.join();
  CHECK(answered == 4);
}

TEST_CASE("8 client threads with 20 requests each all get their own answer", "[http]") {
  TestServer server;
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      auto cli = server.client();
      for (int i = 0; i < 20; ++i) {
        std::string prompt = "t" + std::to_string(t) + "-" + std::to_string(i);
        auto res = i % 5 == 4 ? cli.Post("/v1/generate", "{bad", kJson)
                              : cli.Post("/v1/generate", json{{"prompt", prompt}}.dump(), kJson);
        if (!res) continue;
        if (i % 5 == 4 ? res->status == 400 : json::parse(res->body)["text"] == "echo:" + prompt) ++answered;
      }
    });
  }
  for (auto& c : clients) c.join();
  CHECK(answered == 160);
  CHECK(server.service.generate_calls == 128);
}

TEST_CASE("/health and /health/live answer while serving, /health/ready follows readiness", "[http]") {
  TestServer server;
  auto cli = server.client();
  for (const char* path : {"/health", "/health/live"}) {
    auto res = cli.Get(path);
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(json_body(res) == json({{"status", "live"}}));
    res = cli.Head(path);
    REQUIRE(res);
    CHECK(res->status == 200);
  }
  auto res = cli.Get("/health/ready");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json_body(res) == json({{"status", "ready"}}));

  server.service.ready = {false, "no healthy decode instance is registered"};
  res = cli.Get("/health/ready");
  REQUIRE(res);
  CHECK(res->status == 503);
  CHECK(json_body(res) ==
        json({{"status", "not_ready"}, {"reason", "no healthy decode instance is registered"}}));
  CHECK(cli.Get("/health/live")->status == 200);  // not ready is not dead
}

TEST_CASE("GET /v1/models lists the served model as OpenAI does", "[http]") {
  TestServer server;
  auto j = json_body(server.client().Get("/v1/models"));
  CHECK(j["object"] == "list");
  REQUIRE(j["data"].size() == 1);
  CHECK(j["data"][0]["id"] == "epd-test");
  CHECK(j["data"][0]["object"] == "model");
}

TEST_CASE("GET /v1/instances and /v1/stats have the documented shape", "[http]") {
  TestServer server(small_config(), [](FakeRouterService& s) {
    InstanceView v;
    v.id = "decode-0";
    v.role = "decode";
    v.control_endpoint = "tcp://127.0.0.1:17103";
    v.incarnation = 1ull << 40;
    v.load.healthy = true;
    v.load.free_kv_pages = 1000;
    v.load.total_kv_pages = 1024;
    v.load.free_slots = 0;
    v.load.total_slots = 0;
    v.load.active_rooms = 3;
    v.last_seen_ms = 12;
    v.identity.protocol = 4;
    v.identity.protocol_oldest = 4;
    v.identity.build = "g6aec60513";
    v.identity.model_name = "tiny";
    v.identity.model_digest = "ab12";
    InstanceView encoder;
    encoder.id = "encoder-0";
    encoder.role = "encoder";
    encoder.load.staging = epd::protocol::StagingStats{.ring_bytes = 4096, .ring_peak = 512, .chunks = 7};
    s.instance_list = {v, encoder};
  });
  auto cli = server.client();
  auto res = cli.Get("/v1/instances");
  REQUIRE(res);
  CHECK(res->status == 200);
  auto j = json_body(res);
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 2);
  CHECK(j[0] == json({{"id", "decode-0"},
                      {"role", "decode"},
                      {"control_endpoint", "tcp://127.0.0.1:17103"},
                      {"incarnation", 1ull << 40},
                      {"healthy", true},
                      {"draining", false},
                      {"free_kv_pages", 1000},
                      {"total_kv_pages", 1024},
                      {"free_slots", 0},
                      {"total_slots", 0},
                      {"active_rooms", 3},
                      {"last_seen_ms", 12},
                      {"build", "g6aec60513"},
                      {"protocol", 4},
                      {"protocol_oldest", 4},
                      {"model", "tiny"},
                      {"model_digest", "ab12"},
                      {"worker_restarts", 0},
                      {"transfer_retries", 0},
                      {"transfer_failures", 0},
                      {"transfer_bytes", 0},
                      {"sessions_recycled", 0},
                      {"quarantined_pages", 0},
                      {"fenced_writes", 0},
                      {"cancelled_rooms", 0},
                      {"cached_kv_pages", 0},
                      {"prefix_hit_tokens", 0},
                      {"prefix_missed_tokens", 0}}));
  CHECK(j[1]["id"] == "encoder-0");
  CHECK(j[1]["healthy"] == false);
  CHECK(j[1]["staging"] == json({{"ring_bytes", 4096},
                                 {"ring_used", 0},
                                 {"ring_peak", 512},
                                 {"rounds", 0},
                                 {"chunks", 7},
                                 {"waits", 0},
                                 {"watermarks", 0},
                                 {"rejected", 0},
                                 {"oversized", 0},
                                 {"source_slots", 0},
                                 {"source_slots_free", 0}}));

  res = cli.Get("/v1/stats");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json_body(res) == json({{"requests", 7},
                                {"completed", 5},
                                {"failed", 1},
                                {"retries", 2},
                                {"resumed", 0},
                                {"resumed_tokens", 0},
                                {"cancelled", 0},
                                {"rejected", 0},
                                {"in_flight", 0},
                                {"queued", 0},
                                {"prompt_backlog_tokens", 120},
                                {"prompt_tokens_per_s", 250.5},
                                {"retry_causes", json::object()},
                                {"failure_causes", json::object()},
                                {"tables", json::object()}}));

  // An empty registry is an empty array, not null.
  server.service.instance_list.clear();
  CHECK(json_body(cli.Get("/v1/instances")) == json::array());
}

TEST_CASE("start reports bad configs, a busy port and a second start", "[http]") {
  FakeRouterService service;
  HttpApi first(service, small_config());
  auto port = first.start("127.0.0.1", 0);
  REQUIRE(port.ok());
  CHECK(first.running());
  CHECK(first.port() == *port);

  auto again = first.start("127.0.0.1", 0);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == epd::protocol::ErrorCode::config_error);

  HttpApi second(service, small_config());
  auto busy = second.start("127.0.0.1", *port);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.error().code == epd::protocol::ErrorCode::io_error);
  CHECK(busy.error().detail == "http: 127.0.0.1:" + std::to_string(*port) + " is already in use");
  CHECK_FALSE(second.running());

  auto bad = small_config();
  bad.server.io_threads = 0;
  HttpApi third(service, bad);
  auto invalid = third.start("127.0.0.1", 0);
  REQUIRE_FALSE(invalid.ok());
  CHECK(invalid.error().code == epd::protocol::ErrorCode::config_error);
  CHECK(invalid.error().detail.find("threads") != std::string::npos);

  // stop is idempotent, and the port can be taken again once it is free.
  first.stop();
  first.stop();
  CHECK_FALSE(first.running());
  CHECK(first.port() == 0);
  auto reused = second.start("127.0.0.1", *port);
  CHECK(reused.ok());
}

TEST_CASE("drain() stops new work and waits for the request in flight", "[http]") {
  std::atomic<bool> entered{false};
  auto server = std::make_unique<TestServer>(small_config(), [&](FakeRouterService& s) {
    s.on_generate = [&](const GenerateRequest& r) {
      entered = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return FakeRouterService::echo(r);
    };
  });
  auto idle = server->client(true);  // an open keep-alive connection: new requests on it are refused
  REQUIRE(idle.Get("/health/ready")->status == 200);
  int status = 0;
  std::thread client([&] {
    auto cli = server->client();
    auto res = cli.Post("/v1/generate", R"({"prompt":"slow"})", kJson);
    if (res) status = res->status;
  });
  while (!entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread drainer([&] { CHECK(server->api.drain(std::chrono::seconds(5)) == 0); });
  // Ready until the drain begins; then 503 on the open connection (or no answer: a reply that raced the
  // drain's start closes its connection, and the listener is gone).
  for (;;) {
    auto ready = idle.Get("/health/ready");
    if (!ready || ready->status != 200) {
      if (ready) CHECK(json_body(ready) == json({{"status", "draining"}}));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto late = server->client().Get("/health");  // the listener is closed
  CHECK_FALSE(late);
  drainer.join();
  client.join();
  CHECK(status == 200);  // the in-flight request was completed, not dropped
  CHECK(server->api.in_flight() == 0);
  server->api.stop();
}

TEST_CASE("stop() with a request in flight cancels it and is bounded", "[http]") {
  std::atomic<bool> entered{false};
  TestServer server(small_config(), [&](FakeRouterService& s) {
    s.on_generate = [&](const GenerateRequest& r) {
      entered = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return FakeRouterService::echo(r);
    };
  });
  bool answered = true;
  std::thread client([&] {
    auto cli = server.client();
    answered = bool(cli.Post("/v1/generate", R"({"prompt":"slow"})", kJson));
  });
  while (!entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto t0 = std::chrono::steady_clock::now();
  server.api.stop();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  client.join();
  CHECK_FALSE(answered);
  auto cancels = server.service.cancels();
  REQUIRE(cancels.size() == 1);
  CHECK(cancels[0].second == "the client disconnected");
}

TEST_CASE("stop() is bounded even with an idle keep-alive connection open", "[http]") {
  TestServer server;
  auto cli = server.client(true);  // its connection stays open, idle, while we stop
  REQUIRE(cli.Get("/health"));
  auto t0 = std::chrono::steady_clock::now();
  server.api.stop();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));  // keep_alive_timeout is 1 s
}

TEST_CASE("a burst of 32 simultaneous connections is accepted without SYN retries", "[http]") {
  TestServer server;
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < 32; ++t) {
    clients.emplace_back([&] {
      auto res = server.client().Get("/health");
      if (res && res->status == 200) ++answered;
    });
  }
  for (auto& c : clients) c.join();
  CHECK(answered == 32);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(900));  // a dropped SYN costs 1 s
}

TEST_CASE("a large request is handled off the I/O thread so health answers meanwhile", "[http]") {
  auto config = small_config();
  config.server.io_threads = 1;  // one I/O thread: a handler blocking it would block every connection
  config.server.inline_body_bytes = 1024;
  std::atomic<bool> inside{false}, release{false};
  TestServer server(config, [&](FakeRouterService& s) {
    s.before_generate = [&] {
      inside = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
  });
  std::thread big([&] {
    server.client().Post("/v1/generate", json{{"prompt", "p"}, {"padding", std::string(4000, 'x')}}.dump(),
                         kJson);
  });
  while (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto res = server.client().Get("/health/live");
  CHECK(res);
  CHECK_FALSE(release);  // answered while the large request's handler was still busy
  release = true;
  big.join();
}

TEST_CASE("POST /tokenize and /detokenize answer as llama-server does, with the reference model's bytes",
          "[http]") {
  TestServer server;
  auto c = server.client();
  auto post = [&](const char* path, const json& body) { return c.Post(path, body.dump(), kJson); };

  auto res = post("/tokenize", {{"content", "hi!"}});
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json_body(res) == json{{"tokens", {104, 105, 33}}});
  // add_special puts BOS in front; with_pieces gives each id with its text (bytes where it is not UTF-8).
  res = post("/tokenize", {{"content", "a\xc3\xa9"}, {"add_special", true}, {"with_pieces", true}});
  REQUIRE(res);
  CHECK(json_body(res)["tokens"] == json::parse(R"([{"id":256,"piece":""},{"id":97,"piece":"a"},
                                                     {"id":195,"piece":[195]},{"id":169,"piece":[169]}])"));
  CHECK(json_body(post("/tokenize", json::object())) == json{{"tokens", json::array()}});

  res = post("/detokenize", {{"tokens", {256, 104, 105, 33}}});
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json_body(res) == json{{"content", "hi!"}});
  // Half a UTF-8 character reads as U+FFFD: the reply is JSON text.
  CHECK(json_body(post("/detokenize", {{"tokens", {97, 195}}}))["content"] == "a\xEF\xBF\xBD");

  auto refused = [&](const char* path, const json& body, std::string_view what) {
    auto r = post(path, body);
    REQUIRE(r);
    INFO(r->body);
    CHECK(r->status == 400);
    CHECK(json_body(r)["error"]["message"].get<std::string>().find(what) != std::string::npos);
  };
  refused("/tokenize", {{"content", {1, 2}}}, "\"content\" must be a string");
  refused("/tokenize", {{"content", "x"}, {"with_pieces", "yes"}}, "\"with_pieces\" must be a boolean");
  refused("/tokenize", {{"content", std::string(2000, 'x')}}, "longer than 1024 bytes");
  refused("/detokenize", {{"tokens", {97, 259}}}, "not a token id of the model (0..258)");
  refused("/detokenize", {{"tokens", {-1}}}, "not a token id");
  refused("/detokenize", {{"tokens", "abc"}}, "must be an array");
  auto get = c.Get("/tokenize");
  REQUIRE(get);
  CHECK(get->status == 405);
}
