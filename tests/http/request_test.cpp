// parse_generate_request without a server: each rejection's status, code and message.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "epd/http/base64.hpp"
#include "epd/http/http_request.hpp"

using namespace epd::http;
using nlohmann::json;

namespace {

GenerateLimits limits() {
  GenerateLimits l;
  l.max_prompt_bytes = 100;
  l.max_image_bytes = 64;
  l.default_max_tokens = 16;
  l.max_tokens_limit = 32;
  return l;
}

std::string ppm(size_t pixels) {
  std::string s = "P6\n" + std::to_string(pixels) + " 1\n255\n";
  s.append(pixels * 3, '\x7f');
  return s;
}

std::string b64(std::string_view s) {
  return base64_encode({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

GenerateRequest accepted(std::string_view body) {
  auto r = parse_generate_request(body, limits());
  if (auto* e = std::get_if<HttpError>(&r)) FAIL("rejected: " << e->message);
  return std::get<GenerateRequest>(r);
}

HttpError rejected(std::string_view body) {
  auto r = parse_generate_request(body, limits());
  REQUIRE(std::holds_alternative<HttpError>(r));
  auto e = std::get<HttpError>(r);
  CHECK_FALSE(e.message.empty());
  CHECK((e.status == 400 || e.status == 413));
  CHECK(e.code == (e.status == 400 ? "invalid_request" : "oversized"));
  return e;
}

bool says(const HttpError& e, std::string_view what) {
  return e.message.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("generate request: prompt, defaults, max_tokens, unknown keys", "[http][request]") {
  auto r = accepted(R"({"prompt":"hello"})");
  CHECK(r.prompt == "hello");
  CHECK(r.max_tokens == 16);
  CHECK(r.media.empty());

  r = accepted(R"({"prompt":"hi","max_tokens":32,"temperature":0.5,"extra":{"a":[1,2]}})");
  CHECK(r.max_tokens == 32);
  r = accepted(R"({"prompt":"hi","max_tokens":1,"image":null})");
  CHECK(r.max_tokens == 1);
  r = accepted(R"({"prompt":"hi","max_tokens":null})");
  CHECK(r.max_tokens == 16);
  r = accepted(R"({"prompt":"h\u00e9\u4e2d"})");
  CHECK(r.prompt == "h\xc3\xa9\xe4\xb8\xad");
  r = accepted(std::string(R"({"prompt":")") + std::string(100, 'x') + "\"}");  // exactly the limit
  CHECK(r.prompt.size() == 100);
}

TEST_CASE("generate request: image is decoded from base64 PPM", "[http][request]") {
  auto image = ppm(10);
  auto r = accepted(json{{"prompt", "p"}, {"image", b64(image)}}.dump());
  REQUIRE(r.media.size() == 1);
  CHECK(std::string(r.media[0].begin(), r.media[0].end()) == image);
  // Wrapped base64 (the `base64` tool's output) is fine.
  auto wrapped = b64(image);
  wrapped.insert(8, "\n");
  r = accepted(json{{"prompt", "p"}, {"image", wrapped}}.dump());
  REQUIRE(r.media.size() == 1);
  CHECK(r.media[0].size() == image.size());
}

TEST_CASE("generate request: malformed JSON says where parsing failed", "[http][request]") {
  auto e = rejected(R"({"prompt": "hi",)");
  CHECK(e.status == 400);
  CHECK(says(e, "invalid JSON"));
  CHECK(says(e, "line 1, column"));
  CHECK(says(rejected(""), "invalid JSON"));
  CHECK(says(rejected("{\"prompt\":\"a\"} trailing"), "invalid JSON"));
  CHECK(says(rejected("{\"prompt\":\"\xff\"}"), "invalid JSON"));  // not UTF-8
  CHECK(says(rejected(std::string(10000, '[')), "nested deeper than 32"));
  CHECK(says(rejected("{\"prompt\":\"" + std::string(5000, '\x01')), "invalid JSON"));  // long echo clipped
  CHECK(rejected("{\"prompt\":\"" + std::string(5000, '\x01')).message.size() < 400);
  // A number no double holds is malformed JSON too, not an exception (found by fuzz/fuzz_http_request).
  CHECK(says(rejected(R"({"prompt":"hi","max_tokens":1e999})"), "number overflow"));
  CHECK(rejected("-4e400").status == 400);
}

TEST_CASE("generate request: body and prompt shape", "[http][request]") {
  CHECK(says(rejected("[1,2]"), "must be a JSON object, got array"));
  CHECK(says(rejected("\"prompt\""), "must be a JSON object, got string"));
  CHECK(says(rejected("{}"), "\"prompt\" is required"));
  CHECK(says(rejected(R"({"prompt":null})"), "\"prompt\" is required"));
  CHECK(says(rejected(R"({"prompt":5})"), "\"prompt\" must be a string, got number"));
  CHECK(says(rejected(R"({"prompt":["a"]})"), "got array"));
  CHECK(says(rejected(R"({"prompt":""})"), "must not be empty"));
  auto e = rejected(std::string(R"({"prompt":")") + std::string(101, 'x') + "\"}");
  CHECK(e.status == 413);
  CHECK(says(e, "101 bytes; the limit is 100"));
}

TEST_CASE("generate request: max_tokens type and range", "[http][request]") {
  for (const char* v : {"\"5\"", "1.5", "true", "[]", "{}", "1e3"}) {
    INFO(v);
    CHECK(says(rejected(std::string(R"({"prompt":"p","max_tokens":)") + v + "}"),
               "must be an integer in 1..32"));
  }
  for (const char* v : {"0", "-1", "33", "4294967296", "18446744073709551615"}) {
    INFO(v);
    CHECK(says(rejected(std::string(R"({"prompt":"p","max_tokens":)") + v + "}"), "it must be in 1..32"));
  }
}

TEST_CASE("generate request: sampling fields, their types and ranges", "[http][request]") {
  const auto greedy = accepted(R"({"prompt":"p"})").sampling;
  CHECK(greedy.temperature == 0);
  CHECK(greedy.seed == 0);
  const auto s = accepted(R"({"prompt":"p","temperature":1.5,"top_p":0.25,"top_k":40,"seed":-1})").sampling;
  CHECK(s.temperature == 1.5f);
  CHECK(s.top_p == 0.25f);
  CHECK(s.top_k == 40);
  CHECK(s.seed == UINT64_MAX);  // a negative seed is its two's-complement bit pattern
  CHECK(says(rejected(R"({"prompt":"p","temperature":"1"})"), "\"temperature\" must be a number in [0, 2]"));
  for (const char* v : {"-0.5", "2.5"}) {
    INFO(v);
    CHECK(says(rejected(std::string(R"({"prompt":"p","temperature":)") + v + "}"), "it must be in [0, 2]"));
  }
  for (const char* v : {"0", "1.5", "-1"}) {
    INFO(v);
    CHECK(says(rejected(std::string(R"({"prompt":"p","top_p":)") + v + "}"), "it must be in (0, 1]"));
  }
  // The OpenAI routes' rules, from the same parser: -1 is "off" as vLLM spells it.
  CHECK(accepted(R"({"prompt":"p","top_k":-1})").sampling.top_k == 0);
  for (const char* v : {"1.5", "\"3\""}) {
    INFO(v);
    CHECK(says(rejected(std::string(R"({"prompt":"p","top_k":)") + v + "}"), "\"top_k\" must be an integer"));
  }
  for (const char* v : {"-2", "4294967296"}) {
    INFO(v);
    CHECK(says(rejected(std::string(R"({"prompt":"p","top_k":)") + v + "}"), "it must be 0 or -1 (off)"));
  }
  CHECK(says(rejected(R"({"prompt":"p","seed":1.5})"), "\"seed\" must be an integer"));
  const auto pen =
      accepted(R"({"prompt":"p","presence_penalty":-0.5,"frequency_penalty":1,"repetition_penalty":1.3})")
          .sampling;
  CHECK(pen.presence_penalty == -0.5f);
  CHECK(pen.frequency_penalty == 1.0f);
  CHECK(pen.repetition_penalty == 1.3f);
  CHECK(says(rejected(R"({"prompt":"p","presence_penalty":3})"), "it must be in [-2, 2]"));
  CHECK(says(rejected(R"({"prompt":"p","repetition_penalty":0})"), "it must be in (0, 2]"));
}

TEST_CASE("generate request: image type, base64, PPM magic and size", "[http][request]") {
  CHECK(says(rejected(R"({"prompt":"p","image":5})"), "\"image\" must be a base64 string, got number"));
  CHECK(says(rejected(R"({"prompt":"p","image":""})"), "\"image\" is empty"));
  CHECK(says(rejected(R"({"prompt":"p","image":"!!!!"})"), "invalid base64: '!' at offset 0"));
  CHECK(says(rejected(R"({"prompt":"p","image":"QUJ"})"), "multiple of 4"));
  CHECK(says(rejected(json{{"prompt", "p"}, {"image", b64("GIF89a")}}.dump()), "not a binary PPM"));
  CHECK(says(rejected(json{{"prompt", "p"}, {"image", b64("P3\n1 1\n255\n0 0 0\n")}}.dump()), "\"P6\""));
  auto e = rejected(json{{"prompt", "p"}, {"image", b64(ppm(30))}}.dump());  // 100 bytes > 64
  CHECK(e.status == 413);
  CHECK(says(e, "exceeds the limit of 64 bytes"));
}

TEST_CASE("generate body with prompt_tokens instead of text") {
  const auto r = accepted(R"({"prompt_tokens": [1, 0, 383, 4294967295], "max_tokens": 4})");
  CHECK(r.prompt_tokens == std::vector<uint32_t>{1, 0, 383, 4294967295u});
  CHECK(r.prompt.empty());
  CHECK(r.max_tokens == 4);
  CHECK(rejected(R"({"prompt": "a", "prompt_tokens": [1]})").message ==
        R"(give "prompt" or "prompt_tokens", not both)");
  CHECK(rejected(R"({"prompt_tokens": []})").status == 400);
  CHECK(rejected(R"({"prompt_tokens": "1,2"})").status == 400);
  CHECK(rejected(R"({"prompt_tokens": [1, -2]})").message ==
        R"("prompt_tokens" must hold token ids (integers >= 0), got -2)");
  CHECK(rejected(R"({"prompt_tokens": [1.5]})").status == 400);
  CHECK(rejected(R"({"prompt_tokens": [4294967296]})").status == 400);
  // At most max_prompt_bytes / 4 ids (25 with the test limits).
  CHECK(accepted(json{{"prompt_tokens", std::vector<int>(25, 7)}}.dump()).prompt_tokens.size() == 25);
  CHECK(rejected(json{{"prompt_tokens", std::vector<int>(26, 7)}}.dump()).status == 413);
  CHECK(rejected(R"({"prompt_tokens": null})").message == R"("prompt" is required (a non-empty string))");
}

TEST_CASE("generate request: logprobs is the number of alternatives in 0..20", "[http][request]") {
  CHECK_FALSE(accepted(R"({"prompt":"a"})").sampling.logprobs);
  CHECK_FALSE(accepted(R"({"prompt":"a","logprobs":null})").sampling.logprobs);
  auto r = accepted(R"({"prompt":"a","logprobs":0})");
  CHECK(r.sampling.logprobs);
  CHECK(r.sampling.top_logprobs == 0);
  r = accepted(R"({"prompt":"a","logprobs":20})");
  CHECK(r.sampling.logprobs);
  CHECK(r.sampling.top_logprobs == 20);
  for (const char* bad : {R"({"prompt":"a","logprobs":21})", R"({"prompt":"a","logprobs":-1})",
                          R"({"prompt":"a","logprobs":true})", R"({"prompt":"a","logprobs":"3"})",
                          R"({"prompt":"a","logprobs":2.5})"}) {
    INFO(bad);
    CHECK(says(rejected(bad), "\"logprobs\" must be an integer in 0..20"));
  }
}

TEST_CASE("generate request: a GBNF grammar, a string of at most 64 KiB", "[http][request]") {
  CHECK(accepted(R"({"prompt":"a"})").grammar.empty());
  CHECK(accepted(R"({"prompt":"a","grammar":null})").grammar.empty());
  CHECK(accepted(R"({"prompt":"a","grammar":"root ::= \"x\""})").grammar.gbnf == "root ::= \"x\"");
  CHECK(says(rejected(R"({"prompt":"a","grammar":5})"), "\"grammar\" must be a string (GBNF)"));
  const std::string big = "{\"prompt\":\"a\",\"grammar\":\"" + std::string(65 * 1024, 'a') + "\"}";
  CHECK(says(rejected(big), "the limit is 65536 bytes"));
}
