// The OpenAI routes over real sockets, with a fake router behind them: how tokens become deltas, how a
// failure after the first token is streamed, how a stop string cancels the work, and the route's refusals.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "epd/http/base64.hpp"
#include "epd/model/grammar.hpp"
#include "test_server.hpp"

using namespace epd::http;
using namespace epd::http::test;
using nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

std::vector<uint32_t> bytes_of(std::string_view s) {
  std::vector<uint32_t> out;  // the byte tokenizer: token id = byte
  for (char c : s) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// The JSON events of an SSE body, and whether it ended with [DONE].
std::vector<json> events(const std::string& body, bool* done) {
  std::vector<json> out;
  *done = false;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    size_t end = body.find("\n\n", at);
    std::string data = body.substr(at + 6, end - at - 6);
    if (data == "[DONE]")
      *done = true;
    else
      out.push_back(json::parse(data));
    at = end;
  }
  return out;
}

std::string chat_body(bool stream, std::string extra = "") {
  return R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":32,"stream":)" +
         std::string(stream ? "true" : "false") + extra + "}";
}

GenerateResponse ok_answer(const std::vector<uint32_t>& tokens) {
  GenerateResponse r;
  r.tokens = tokens;
  r.prompt_tokens = 11;
  r.room = 42;
  r.attempts = 1;
  return r;
}

}  // namespace

TEST_CASE("openai route: tokens that split a character arrive as whole characters", "[http][openai_route]") {
  TestServer server(small_config(), [](FakeRouterService& s) {
    s.drive = [](const GenerateRequest&, GenerationSink& sink) {
      const auto all = bytes_of("caf\xc3\xa9 \xf0\x9f\x98\x80!");  // é and an emoji, 2 and 4 bytes
      for (uint32_t t : all) sink.on_tokens(std::span(&t, 1));     // one token per TOKENS, as decode streams
      sink.on_done(ok_answer(all));
    };
  });
  auto res = server.client().Post("/v1/chat/completions", chat_body(true), kJson);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == "text/event-stream");
  bool done = false;
  auto evs = events(res->body, &done);
  CHECK(done);
  std::string text;
  for (const auto& e : evs) {
    const auto& delta = e["choices"][0]["delta"];
    if (!delta.contains("content")) continue;
    const std::string piece = delta["content"];
    CHECK(piece.find("\xef\xbf\xbd") == std::string::npos);  // never a replacement character
    text += piece;
  }
  CHECK(text == "caf\xc3\xa9 \xf0\x9f\x98\x80!");
  CHECK(evs.front()["choices"][0]["delta"]["role"] == "assistant");
  CHECK(evs.back()["choices"][0]["finish_reason"] == "length");
  CHECK(evs.back()["epd"]["room"] == 42);
}

TEST_CASE("openai route: a failure after the first token is an error event, then DONE",
          "[http][openai_route]") {
  TestServer server(small_config(), [](FakeRouterService& s) {
    s.drive = [](const GenerateRequest&, GenerationSink& sink) {
      auto some = bytes_of("abc");
      sink.on_tokens(some);
      GenerateResponse r;
      r.http_status = 502;
      r.error_code = "peer_died";
      r.error = "'decode-0' died";
      sink.on_done(r);
    };
  });
  auto res = server.client().Post("/v1/completions", R"({"prompt":"x","stream":true})", kJson);
  REQUIRE(res);
  CHECK(res->status == 200);  // the head went out with the first token
  bool done = false;
  auto evs = events(res->body, &done);
  CHECK(done);
  REQUIRE(evs.size() >= 2);
  std::string text;
  for (size_t i = 0; i + 1 < evs.size(); ++i) text += evs[i]["choices"][0]["text"].get<std::string>();
  CHECK(text == "abc");
  CHECK(evs.back() == json({{"error",
                             {{"message", "'decode-0' died"},
                              {"type", "server_error"},
                              {"param", nullptr},
                              {"code", "peer_died"}}}}));
}

TEST_CASE("openai route: a failure before any token is a plain HTTP error, 429 with Retry-After",
          "[http][openai_route]") {
  TestServer server(small_config(), [](FakeRouterService& s) {
    s.drive = [](const GenerateRequest&, GenerationSink& sink) {
      GenerateResponse r;
      r.http_status = 429;
      r.error_code = "out_of_capacity";
      r.error = "the router is at its limit";
      r.retry_after_s = 1;
      sink.on_done(r);
    };
  });
  auto res = server.client().Post("/v1/chat/completions", chat_body(true), kJson);
  REQUIRE(res);
  CHECK(res->status == 429);
  CHECK(res->get_header_value("Retry-After") == "1");
  CHECK(res->get_header_value("Content-Type") == kJson);
  auto j = json::parse(res->body);
  CHECK(j["error"]["code"] == "out_of_capacity");
  CHECK(j["error"]["type"] == "requests");
  CHECK_FALSE(res->get_header_value("X-Request-Id").empty());
}

TEST_CASE("openai route: a stop string ends the answer and cancels the work", "[http][openai_route]") {
  FakeRouterService* service = nullptr;
  TestServer server(small_config(), [&](FakeRouterService& s) {
    service = &s;
    s.drive = [&](const GenerateRequest&, GenerationSink& sink) {
      auto first = bytes_of("one two ST");
      sink.on_tokens(first);
      auto second = bytes_of("OP three");
      sink.on_tokens(second);
      // The router keeps generating until the cancel reaches it, then answers the cancel.
      GenerateResponse r;
      r.http_status = service->cancelled(std::chrono::seconds(2)) ? 499 : 200;
      r.error_code = "aborted";
      r.prompt_tokens = 11;
      sink.on_done(r);
    };
  });
  for (bool stream : {false, true}) {
    auto res = server.client().Post("/v1/chat/completions", chat_body(stream, R"(,"stop":["STOP"])"), kJson);
    REQUIRE(res);
    CHECK(res->status == 200);
    std::string text, finish;
    json usage;
    if (stream) {
      bool done = false;
      for (const auto& e : events(res->body, &done)) {
        if (e["choices"].empty()) continue;
        const auto& c = e["choices"][0];
        if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
      }
      CHECK(done);
    } else {
      auto j = json::parse(res->body);
      text = j["choices"][0]["message"]["content"];
      finish = j["choices"][0]["finish_reason"];
      usage = j["usage"];
      CHECK(usage["prompt_tokens"] == 11);
      CHECK(usage["completion_tokens"] == 12);  // tokens up to the one that completed the stop string
    }
    CHECK(text == "one two ");
    CHECK(finish == "stop");
  }
  auto cancels = service->cancels();
  REQUIRE(cancels.size() == 2);
  CHECK(cancels[0].second == "a stop string ended the answer");
}

TEST_CASE("openai route: a client that hangs up mid-stream cancels its request", "[http][openai_route]") {
  FakeRouterService* service = nullptr;
  TestServer server(small_config(), [&](FakeRouterService& s) {
    service = &s;
    s.drive = [&](const GenerateRequest&, GenerationSink& sink) {
      auto t = bytes_of("a");
      for (int i = 0; i < 200 && !service->cancelled(std::chrono::milliseconds(10)); ++i) sink.on_tokens(t);
      GenerateResponse r;
      r.http_status = 499;
      r.error_code = "aborted";
      sink.on_done(r);
    };
  });
  // Read until some tokens arrived, then hang up.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server.port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  const std::string body = R"({"prompt":"x","stream":true,"max_tokens":64})";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  REQUIRE(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size()));
  size_t received = 0;
  char buf[4096];
  while (received < 400) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    received += size_t(n);
  }
  ::close(fd);
  CHECK(received > 0);
  REQUIRE(service->cancelled(std::chrono::seconds(2)));
  CHECK(service->cancels()[0].second == "the client disconnected");
}

TEST_CASE("openai route: what the route itself refuses", "[http][openai_route]") {
  TestServer server;
  auto cli = server.client();
  auto res = cli.Post("/v1/completions", R"({"model":"gpt-4o","prompt":"x"})", kJson);
  REQUIRE(res);
  CHECK(res->status == 404);
  auto j = json::parse(res->body);
  CHECK(j["error"]["code"] == "model_not_found");
  CHECK(j["error"]["param"] == "model");

  std::string ppm = "P6\n1 1\n255\n\x10\x20\x30";
  const std::string uri = "data:image/x-portable-pixmap;base64," +
                          base64_encode({reinterpret_cast<const uint8_t*>(ppm.data()), ppm.size()});
  json two_images = {{"messages",
                      {{{"role", "user"},
                        {"content",
                         {{{"type", "image_url"}, {"image_url", {{"url", uri}}}},
                          {{"type", "image_url"}, {"image_url", {{"url", uri}}}}}}}}}};
  // Both images reach the router, in order, each where its marker stands: the model's codec decides how
  // many it takes (the reference model one, a model with an mmproj any number).
  res = cli.Post("/v1/chat/completions", two_images.dump(), kJson);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(server.service.last_request().media.size() == 2);
  CHECK(server.service.last_request().messages.at(0).text == "<__media__><__media__>");

  // One image reaches the router decoded and re-encoded as PPM; X-Request-Id is taken from the client.
  json one_image = two_images;
  one_image["messages"][0]["content"].erase(1);
  res = cli.Post("/v1/chat/completions", httplib::Headers{{"X-Request-Id", "my-req-1"}}, one_image.dump(),
                 kJson);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("X-Request-Id") == "my-req-1");
  const auto last = server.service.last_request();
  CHECK(last.request_id == "my-req-1");
  REQUIRE(last.media.size() == 1);
  CHECK(std::string(last.media[0].begin(), last.media[0].end()) == ppm);
  REQUIRE(last.messages.size() == 1);
  CHECK(last.messages[0].image);

  res = cli.Post("/v1/completions", httplib::Headers{{"X-Request-Id", std::string(200, 'x')}},
                 R"({"prompt":"x"})", kJson);
  REQUIRE(res);
  CHECK(res->status == 400);
}

TEST_CASE("openai route: logprobs, one entry per counted token, streamed as non-streamed",
          "[http][openai_route]") {
  FakeRouterService* service = nullptr;
  TestServer server(small_config(), [&](FakeRouterService& s) {
    service = &s;
    s.drive = [&](const GenerateRequest& request, GenerationSink& sink) {
      CHECK(request.sampling.logprobs);
      CHECK(request.sampling.top_logprobs == 2);
      // Token t's logprob is -t/256, its alternatives t and t+1; an "\xC3" "\xA9" pair splits a character.
      for (const std::string& piece : {std::string("ab \xC3"), std::string("\xA9 ST"), std::string("OP x")}) {
        auto tokens = bytes_of(piece);
        std::vector<epd::model::TokenLogprobs> lp;
        for (uint32_t t : tokens)
          lp.push_back({-float(t) / 256, {{t, -float(t) / 256}, {t + 1, -float(t + 1) / 256}}});
        sink.on_logprobs(lp);
        sink.on_tokens(tokens);
      }
      GenerateResponse r;
      r.http_status = service->cancelled(std::chrono::seconds(2)) ? 499 : 200;
      r.error_code = "aborted";
      r.prompt_tokens = 11;
      sink.on_done(r);
    };
  });
  const std::string extra = R"(,"stop":["STOP"],"logprobs":true,"top_logprobs":2)";
  json plain, streamed = json::array();
  for (bool stream : {false, true}) {
    auto res = server.client().Post("/v1/chat/completions", chat_body(stream, extra), kJson);
    REQUIRE(res);
    CHECK(res->status == 200);
    if (!stream) {
      auto j = json::parse(res->body);
      plain = j["choices"][0]["logprobs"]["content"];
      CHECK(j["usage"]["completion_tokens"] == plain.size());
      continue;
    }
    bool done = false;
    for (const auto& e : events(res->body, &done)) {
      if (e["choices"].empty() || e["choices"][0]["logprobs"].is_null()) continue;
      const auto& c = e["choices"][0];
      // A chunk's entries are those of the tokens whose text it carries (or, finishing, of none).
      if (c["delta"].contains("content") && !c["delta"]["content"].get<std::string>().empty())
        CHECK_FALSE(c["logprobs"]["content"].empty());
      for (const auto& entry : c["logprobs"]["content"]) streamed.push_back(entry);
    }
    CHECK(done);
  }
  // "ab é STOP": every token through the P that completed the stop string, the split character's bytes as
  // U+FFFD each with its own bytes.
  REQUIRE(plain.size() == 10);
  CHECK(plain == streamed);
  CHECK(plain[0] == json::parse(R"({"token":"a","logprob":-0.37890625,"bytes":[97],"top_logprobs":[)"
                                R"({"token":"a","logprob":-0.37890625,"bytes":[97]},)"
                                R"({"token":"b","logprob":-0.3828125,"bytes":[98]}]})"));
  CHECK(plain[3]["token"] == "\xEF\xBF\xBD");
  CHECK(plain[3]["bytes"] == json::array({0xC3}));
  CHECK(plain[9]["token"] == "P");
}

TEST_CASE("openai route: constraints reach the router as GBNF, a schema converted once",
          "[http][openai_route]") {
  TestServer server;
  auto cli = server.client();
  auto post = [&](const json& extra) {
    json body = {{"prompt", "x"}, {"max_tokens", 4}};
    body.update(extra);
    auto res = cli.Post("/v1/completions", body.dump(), kJson);
    REQUIRE(res);
    return std::pair{res->status, json::parse(res->body)};
  };
  CHECK(post({{"grammar", "root ::= \"yes\" | \"no\""}}).first == 200);
  CHECK(server.service.last_request().grammar.gbnf == "root ::= \"yes\" | \"no\"");
  CHECK(post({{"response_format", {{"type", "json_object"}}}}).first == 200);
  CHECK(server.service.last_request().grammar.gbnf == epd::model::json_object_grammar());
  const json schema = {{"type", "object"},
                       {"properties", {{"ok", {{"type", "boolean"}}}}},
                       {"required", {"ok"}},
                       {"additionalProperties", false}};
  CHECK(post({{"response_format",
               {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}}})
            .first == 200);
  const std::string gbnf = server.service.last_request().grammar.gbnf;
  CHECK(gbnf.find("root ::=") != std::string::npos);
  CHECK(gbnf.find("\"\\\"ok\\\"\"") != std::string::npos);
  CHECK(post({{"json_schema", schema}}).first == 200);
  CHECK(server.service.last_request().grammar.gbnf == gbnf);
  CHECK(post(json::object()).first == 200);
  CHECK(server.service.last_request().grammar.empty());

  // A schema llama.cpp's converter refuses is a 400 naming the field, before the router sees it.
  for (const json& bad : {json{{"$ref", "#/$defs/missing"}}, json{{"$ref", "https://example.com/s.json"}}}) {
    INFO(bad.dump());
    const auto [status, body] = post({{"json_schema", bad}});
    CHECK(status == 400);
    CHECK(body["error"]["param"] == "json_schema");
    CHECK(body["error"]["message"].get<std::string>().find("JSON schema") != std::string::npos);
  }
}

namespace tool_route {

const std::string kTools =
    R"(,"tools":[{"type":"function","function":{"name":"add","parameters":{"type":"object","properties":)"
    R"({"a":{"type":"integer"}},"required":["a"]}}}])";
const std::string kCallText =
    "Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n</tool_call>";

// Tokens of `text` in pieces of 3 bytes, so the call's marker arrives split.
void drive_text(const std::string& text, GenerationSink& sink) {
  const auto all = bytes_of(text);
  for (size_t at = 0; at < all.size(); at += 3)
    sink.on_tokens(std::span(all).subspan(at, std::min<size_t>(3, all.size() - at)));
  GenerateResponse r = ok_answer({});
  r.ended_at_eos = true;
  sink.on_done(std::move(r));
}

}  // namespace tool_route

TEST_CASE("openai route: a call in the answer becomes tool_calls, plain and streamed",
          "[http][openai_route][tools]") {
  using namespace tool_route;
  TestServer server;
  server.service.drive = [](const GenerateRequest&, GenerationSink& sink) { drive_text(kCallText, sink); };
  auto cli = server.client();

  auto res = cli.Post("/v1/chat/completions", chat_body(false, kTools + R"(,"n":2)"), kJson);
  REQUIRE(res);
  REQUIRE(res->status == 200);
  const json j = json::parse(res->body);
  REQUIRE(j["choices"].size() == 2);
  for (const auto& c : j["choices"]) {
    INFO(c.dump());
    CHECK(c["finish_reason"] == "tool_calls");
    CHECK(c["message"]["content"] == "Sure.");
    REQUIRE(c["message"]["tool_calls"].size() == 1);
    const json& call = c["message"]["tool_calls"][0];
    CHECK(call["type"] == "function");
    CHECK(call["id"].get<std::string>().starts_with("call_"));
    CHECK(call["function"]["name"] == "add");
    CHECK(call["function"]["arguments"] == R"({"a":3})");
  }
  // The router was given the tools to render and, for "auto", no grammar.
  const GenerateRequest seen = server.service.last_request();
  REQUIRE(seen.tools.size() == 1);
  CHECK(seen.tools[0].name == "add");
  CHECK(seen.grammar.empty());

  auto streamed = cli.Post("/v1/chat/completions", chat_body(true, kTools), kJson);
  REQUIRE(streamed);
  bool done = false;
  const auto e = events(streamed->body, &done);
  CHECK(done);
  std::string content;
  json calls = json::array();
  std::string finish;
  for (const auto& chunk : e) {
    const json& d = chunk["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) calls.push_back(d["tool_calls"][0]);
    if (chunk["choices"][0]["finish_reason"].is_string()) finish = chunk["choices"][0]["finish_reason"];
  }
  CHECK(content == "Sure.\n");  // the text before the call streams; the call is held back
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]["index"] == 0);
  CHECK(calls[0]["function"]["name"] == "add");
  CHECK(calls[0]["function"]["arguments"] == R"({"a":3})");
  CHECK(finish == "tool_calls");
}

TEST_CASE("openai route: no calls with tool_choice none, text that is no call is sent whole",
          "[http][openai_route][tools]") {
  using namespace tool_route;
  TestServer server;
  const std::string broken = "a <tool_call> that never closes";
  std::string text = kCallText;
  server.service.drive = [&text](const GenerateRequest&, GenerationSink& sink) { drive_text(text, sink); };
  auto cli = server.client();
  auto res = cli.Post("/v1/chat/completions", chat_body(false, kTools + R"(,"tool_choice":"none")"), kJson);
  REQUIRE(res);
  json j = json::parse(res->body);
  CHECK(j["choices"][0]["message"]["content"] == kCallText);
  CHECK_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  CHECK(server.service.last_request().tools.empty());  // nothing of the tools in the prompt

  text = broken;
  auto s = cli.Post("/v1/chat/completions", chat_body(true, kTools), kJson);
  REQUIRE(s);
  bool done = false;
  std::string content;
  for (const auto& chunk : events(s->body, &done)) {
    CHECK_FALSE(chunk["choices"][0]["delta"].contains("tool_calls"));
    if (chunk["choices"][0]["delta"].contains("content")) content += chunk["choices"][0]["delta"]["content"];
  }
  CHECK(content == broken);
}

TEST_CASE("openai route: the reference model's calls cannot be forced: required and named are a 400",
          "[http][openai_route][tools]") {
  // Forced calls are grammars of llama.cpp's chat layer over a checkpoint's vocabulary
  // (tests/e2e/tools_openai_test.cpp); the reference model (here: no checkpoint codec) takes no grammar.
  using namespace tool_route;
  TestServer server;
  auto cli = server.client();
  for (const std::string choice : {R"("required")", R"({"type":"function","function":{"name":"add"}})"}) {
    INFO(choice);
    auto res =
        cli.Post("/v1/chat/completions", chat_body(false, kTools + R"(,"tool_choice":)" + choice), kJson);
    REQUIRE(res);
    CHECK(res->status == 400);
    CHECK(json::parse(res->body)["error"]["param"] == "tool_choice");
  }
  CHECK(server.service.generate_calls == 0);
  auto automatic = cli.Post("/v1/chat/completions", chat_body(false, kTools), kJson);
  REQUIRE(automatic);
  CHECK(automatic->status == 200);
  CHECK(server.service.last_request().grammar.empty());
  CHECK(server.service.last_request().tools.size() == 1);
}
