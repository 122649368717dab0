// openai::parse_request without a server: what each endpoint takes, and each rejection's status, code,
// param and message.
#include "epd/http/openai_request.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "epd/http/base64.hpp"

using namespace epd::http;
using namespace epd::http::openai;
using nlohmann::json;

namespace {

Limits request_limits() {
  Limits l;
  l.max_prompt_bytes = 100;
  l.max_image_bytes = 64;
  l.default_max_tokens = 16;
  l.max_tokens_limit = 32;
  l.max_messages = 4;
  l.max_stop_bytes = 8;
  return l;
}

const std::string kRequestPng("\x89PNG\r\n\x1a\nxx", 10);

std::string png_uri(const std::string& bytes = kRequestPng) {
  return "data:image/png;base64," +
         base64_encode({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

Request accepted(Endpoint endpoint, const json& body) {
  auto r = parse_request(endpoint, body.dump(), request_limits());
  if (auto* e = std::get_if<HttpError>(&r)) FAIL("rejected: " << e->message << " (param " << e->param << ")");
  return std::get<Request>(r);
}

HttpError rejected(Endpoint endpoint, std::string_view body) {
  auto r = parse_request(endpoint, body, request_limits());
  REQUIRE(std::holds_alternative<HttpError>(r));
  auto e = std::get<HttpError>(r);
  INFO("message: " << e.message);
  CHECK_FALSE(e.message.empty());
  CHECK((e.status == 400 || e.status == 413));
  CHECK(e.code == (e.status == 400 ? "invalid_request" : "oversized"));
  return e;
}

HttpError rejected(Endpoint endpoint, const json& body) {
  return rejected(endpoint, std::string_view(body.dump()));
}

// A completions body: {"prompt":"p"} plus `extra`.
json completion(json extra = json::object()) {
  json body = {{"prompt", "p"}};
  body.update(extra);
  return body;
}

// A chat body with one user message "hi" plus `extra`.
json chat(json extra = json::object()) {
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  body.update(extra);
  return body;
}

json user(json content) {
  return {{"messages", {{{"role", "user"}, {"content", std::move(content)}}}}};
}

// The rejection names `param` and its message contains `what`.
void check(const HttpError& e, std::string_view param, std::string_view what, int status = 400) {
  INFO("message: " << e.message);
  CHECK(e.status == status);
  CHECK(e.param == param);
  CHECK(e.message.find(what) != std::string::npos);
}

}  // namespace

TEST_CASE("openai request: a completion with every supported field", "[http][openai_request]") {
  auto r = accepted(Endpoint::completions, {{"model", "epd-tiny"},
                                            {"prompt", "Once upon a time"},
                                            {"max_tokens", 32},
                                            {"temperature", 0.7},
                                            {"top_p", 0.9},
                                            {"top_k", 40},
                                            {"seed", 1234},
                                            {"stop", {"\n", "END"}},
                                            {"stream", true},
                                            {"stream_options", {{"include_usage", true}}},
                                            {"n", 1},
                                            {"user", "someone"},
                                            {"unknown_extension", {{"a", 1}}}});
  CHECK(r.endpoint == Endpoint::completions);
  CHECK(r.model == "epd-tiny");
  CHECK(r.prompt == "Once upon a time");
  CHECK(r.messages.empty());
  CHECK(r.max_tokens == 32);
  CHECK(r.sampling.temperature == Approx(0.7));
  CHECK(r.sampling.top_p == Approx(0.9));
  CHECK(r.sampling.top_k == 40);
  CHECK(r.sampling.seed == 1234);
  CHECK(r.seed_given);
  CHECK(r.stop == std::vector<std::string>{"\n", "END"});
  CHECK(r.stream);
  CHECK(r.include_usage);
}

TEST_CASE("openai request: defaults, and null meaning absent", "[http][openai_request]") {
  auto r = accepted(Endpoint::completions, completion());
  CHECK(r.model.empty());
  CHECK(r.max_tokens == 16);
  CHECK(r.sampling.temperature == 0);
  CHECK(r.sampling.top_p == 1);
  CHECK(r.sampling.top_k == 0);
  CHECK_FALSE(r.seed_given);
  CHECK(r.stop.empty());
  CHECK_FALSE(r.stream);
  CHECK_FALSE(r.include_usage);

  r = accepted(Endpoint::completions, completion({{"model", nullptr},
                                                  {"max_tokens", nullptr},
                                                  {"temperature", nullptr},
                                                  {"stop", nullptr},
                                                  {"stream", nullptr},
                                                  {"stream_options", nullptr},
                                                  {"n", nullptr},
                                                  {"logprobs", nullptr},
                                                  {"seed", nullptr}}));
  CHECK(r.max_tokens == 16);
  CHECK_FALSE(r.seed_given);
  // Values that ask for nothing unusual are fine.
  accepted(Endpoint::completions, completion({{"echo", false},
                                              {"best_of", 1},
                                              {"suffix", ""},
                                              {"presence_penalty", 0},
                                              {"frequency_penalty", 0.0},
                                              {"logit_bias", json::object()},
                                              {"stop", json::array()}}));
}

TEST_CASE("openai request: prompt shapes", "[http][openai_request]") {
  CHECK(accepted(Endpoint::completions, {{"prompt", {"only one"}}}).prompt == "only one");
  CHECK(accepted(Endpoint::completions, {{"prompt", "h\u00e9"}}).prompt == "h\xc3\xa9");
  CHECK(accepted(Endpoint::completions, {{"prompt", std::string(100, 'x')}}).prompt.size() == 100);

  check(rejected(Endpoint::completions, json::object()), "prompt", "\"prompt\" is required");
  check(rejected(Endpoint::completions, {{"prompt", nullptr}}), "prompt", "is required");
  check(rejected(Endpoint::completions, {{"prompt", 5}}), "prompt",
        "\"prompt\" must be a string, got number");
  check(rejected(Endpoint::completions, {{"prompt", ""}}), "prompt", "must not be empty");
  check(rejected(Endpoint::completions, {{"prompt", json::array()}}), "prompt", "empty array");
  check(rejected(Endpoint::completions, {{"prompt", {1, 2, 3}}}), "prompt", "token ids is not supported");
  check(rejected(Endpoint::completions, {{"prompt", {{1, 2}, {3}}}}), "prompt", "token ids");
  check(rejected(Endpoint::completions, {{"prompt", {"a", "b"}}}), "prompt",
        "holds 2 prompts; epd takes one prompt per request");
  check(rejected(Endpoint::completions, {{"prompt", {true}}}), "prompt[0]", "must be a string, got boolean");
  check(rejected(Endpoint::completions, {{"prompt", {""}}}), "prompt[0]", "must not be empty");
  check(rejected(Endpoint::completions, {{"prompt", std::string(101, 'x')}}), "prompt",
        "101 bytes; the limit is 100", 413);
  // The other endpoint's input field is not looked at.
  check(rejected(Endpoint::completions, chat()), "prompt", "is required");
}

TEST_CASE("openai request: malformed bodies", "[http][openai_request]") {
  auto e = rejected(Endpoint::chat, std::string_view(R"({"messages": [)"));
  CHECK(e.message.find("invalid JSON") != std::string::npos);
  CHECK(e.param.empty());
  CHECK(rejected(Endpoint::chat, std::string_view("[]")).message ==
        "request body must be a JSON object, got array");
  CHECK(rejected(Endpoint::completions, std::string_view("\"x\"")).message.find("got string") !=
        std::string::npos);
  // Deep nesting is refused while parsing, even inside a field that would be ignored.
  std::string deep = "{\"prompt\":\"p\",\"x\":" + std::string(40, '[') + std::string(40, ']') + "}";
  CHECK(rejected(Endpoint::completions, std::string_view(deep)).message.find("nested deeper than 32") !=
        std::string::npos);
  // A number no double holds, even in an ignored field, is a 400 (found by fuzz/fuzz_http_request).
  const auto huge = rejected(Endpoint::chat, std::string_view(R"({"messages":[],"x":1e999})"));
  CHECK(huge.status == 400);
  CHECK(huge.message.find("number overflow") != std::string::npos);
}

TEST_CASE("openai request: max_tokens and max_completion_tokens", "[http][openai_request]") {
  CHECK(accepted(Endpoint::chat, chat({{"max_completion_tokens", 7}})).max_tokens == 7);
  CHECK(accepted(Endpoint::completions, completion({{"max_completion_tokens", 7}})).max_tokens == 7);
  CHECK(accepted(Endpoint::chat, chat({{"max_tokens", 5}, {"max_completion_tokens", 5}})).max_tokens == 5);
  CHECK(accepted(Endpoint::chat, chat({{"max_tokens", 1}})).max_tokens == 1);
  check(rejected(Endpoint::chat, chat({{"max_tokens", 5}, {"max_completion_tokens", 6}})),
        "max_completion_tokens", "differ");
  for (json v : {json("5"), json(1.5), json(true), json(1e3), json::array()}) {
    INFO(v.dump());
    check(rejected(Endpoint::completions, completion({{"max_tokens", v}})), "max_tokens",
          "\"max_tokens\" must be an integer in 1..32");
  }
  for (json v : {json(0), json(-1), json(33), json(4294967296ull), json(UINT64_MAX)}) {
    INFO(v.dump());
    check(rejected(Endpoint::chat, chat({{"max_completion_tokens", v}})), "max_completion_tokens",
          "it must be in 1..32");
  }
}

TEST_CASE("openai request: temperature, top_p, top_k, seed", "[http][openai_request]") {
  CHECK(accepted(Endpoint::chat, chat({{"temperature", 0}})).sampling.temperature == 0);
  CHECK(accepted(Endpoint::chat, chat({{"temperature", 2}})).sampling.temperature == 2);
  CHECK(accepted(Endpoint::chat, chat({{"top_p", 1}})).sampling.top_p == 1);
  CHECK(accepted(Endpoint::chat, chat({{"top_p", 1e-9}})).sampling.top_p > 0);
  CHECK(accepted(Endpoint::chat, chat({{"top_k", 0}})).sampling.top_k == 0);
  CHECK(accepted(Endpoint::chat, chat({{"top_k", -1}})).sampling.top_k == 0);  // vLLM's "off"
  CHECK(accepted(Endpoint::chat, chat({{"top_k", 4294967295ull}})).sampling.top_k == 4294967295u);
  CHECK(accepted(Endpoint::chat, chat({{"seed", -1}})).sampling.seed == UINT64_MAX);  // two's complement
  CHECK(accepted(Endpoint::chat, chat({{"seed", INT64_MIN}})).sampling.seed == 1ull << 63);
  CHECK(accepted(Endpoint::chat, chat({{"seed", UINT64_MAX}})).sampling.seed == UINT64_MAX);
  CHECK(accepted(Endpoint::chat, chat({{"seed", 0}})).seed_given);

  check(rejected(Endpoint::chat, chat({{"temperature", -0.1}})), "temperature",
        "is -0.1; it must be in [0, 2]");
  check(rejected(Endpoint::chat, chat({{"temperature", 2.5}})), "temperature", "it must be in [0, 2]");
  check(rejected(Endpoint::chat, chat({{"temperature", "1"}})), "temperature",
        "\"temperature\" must be a number in [0, 2], got string");
  check(rejected(Endpoint::chat, chat({{"top_p", 0}})), "top_p", "is 0; it must be in (0, 1]");
  CHECK(accepted(Endpoint::chat, chat({{"min_p", 0}})).sampling.min_p == 0);
  CHECK(accepted(Endpoint::chat, chat({{"min_p", 0.05}})).sampling.min_p == 0.05f);
  CHECK(accepted(Endpoint::chat, chat({{"min_p", 1}})).sampling.min_p == 1);
  check(rejected(Endpoint::chat, chat({{"min_p", 1.5}})), "min_p", "is 1.5; it must be in [0, 1]");
  check(rejected(Endpoint::chat, chat({{"min_p", -0.1}})), "min_p", "it must be in [0, 1]");
  check(rejected(Endpoint::chat, chat({{"top_p", 1.01}})), "top_p", "(0, 1]");
  // Above 0 as a double, 0 as the float the sampler gets.
  check(rejected(Endpoint::chat, chat({{"top_p", 1e-50}})), "top_p", "it must be in (0, 1]");
  check(rejected(Endpoint::chat, chat({{"top_k", -2}})), "top_k", "is -2; it must be 0 or -1 (off)");
  check(rejected(Endpoint::chat, chat({{"top_k", 4294967296ull}})), "top_k", "below 2^32");
  check(rejected(Endpoint::chat, chat({{"top_k", 1.5}})), "top_k", "must be an integer");
  check(rejected(Endpoint::chat, chat({{"seed", 1.5}})), "seed", "\"seed\" must be an integer, got number");
  check(rejected(Endpoint::chat, chat({{"seed", "7"}})), "seed", "got string");
}

TEST_CASE("openai request: stop strings", "[http][openai_request]") {
  CHECK(accepted(Endpoint::chat, chat({{"stop", "\n"}})).stop == std::vector<std::string>{"\n"});
  CHECK(accepted(Endpoint::chat, chat({{"stop", {"a", "b", "c", "12345678"}}})).stop.size() == 4);
  check(rejected(Endpoint::chat, chat({{"stop", {"a", "b", "c", "d", "e"}}})), "stop",
        "holds 5 strings; at most 4");
  check(rejected(Endpoint::chat, chat({{"stop", ""}})), "stop", "\"stop\" must not be empty");
  check(rejected(Endpoint::chat, chat({{"stop", {"a", ""}}})), "stop[1]", "\"stop[1]\" must not be empty");
  check(rejected(Endpoint::chat, chat({{"stop", {"a", 5}}})), "stop[1]", "must be a string, got number");
  check(rejected(Endpoint::chat, chat({{"stop", "123456789"}})), "stop", "9 bytes; the limit is 8 bytes");
  check(rejected(Endpoint::chat, chat({{"stop", 5}})), "stop", "a string or an array of up to 4 strings");
}

TEST_CASE("openai request: stream and stream_options", "[http][openai_request]") {
  auto r = accepted(Endpoint::chat, chat({{"stream", true}}));
  CHECK(r.stream);
  CHECK_FALSE(r.include_usage);
  r = accepted(Endpoint::chat, chat({{"stream", true}, {"stream_options", {{"include_usage", false}}}}));
  CHECK_FALSE(r.include_usage);
  r = accepted(Endpoint::chat,
               chat({{"stream", true}, {"stream_options", {{"continuous_usage_stats", true}}}}));
  CHECK_FALSE(r.include_usage);  // vLLM's extra option is ignored
  check(rejected(Endpoint::chat, chat({{"stream", "yes"}})), "stream",
        "\"stream\" must be a boolean, got string");
  check(rejected(Endpoint::chat, chat({{"stream_options", {{"include_usage", true}}}})), "stream_options",
        "only allowed when \"stream\" is true");
  check(rejected(Endpoint::chat, chat({{"stream", false}, {"stream_options", {{"include_usage", true}}}})),
        "stream_options", "only allowed");
  check(rejected(Endpoint::chat, chat({{"stream", true}, {"stream_options", true}})), "stream_options",
        "must be an object");
  check(rejected(Endpoint::chat, chat({{"stream", true}, {"stream_options", {{"include_usage", 1}}}})),
        "stream_options.include_usage", "must be a boolean, got number");
}

TEST_CASE("openai request: n from 1 to 8, and the completions fields epd cannot honour",
          "[http][openai_request]") {
  CHECK(accepted(Endpoint::completions, completion({{"n", 2}})).n == 2);
  CHECK(accepted(Endpoint::chat, chat({{"n", 8}})).n == 8);
  CHECK(accepted(Endpoint::chat, chat()).n == 1);
  check(rejected(Endpoint::completions, completion({{"n", 9}})), "n", "\"n\" is 9; it must be in 1..8");
  check(rejected(Endpoint::chat, chat({{"n", 0}})), "n", "\"n\" is 0");
  check(rejected(Endpoint::chat, chat({{"n", -1}})), "n", "\"n\" is -1");
  check(rejected(Endpoint::chat, chat({{"n", "1"}})), "n", "must be an integer");
  check(rejected(Endpoint::completions, completion({{"best_of", 2}})), "best_of",
        "other than 1 is not supported");
  check(rejected(Endpoint::completions, completion({{"echo", true}})), "echo",
        "\"echo\": true is not supported");
  check(rejected(Endpoint::completions, completion({{"echo", 1}})), "echo", "must be a boolean");
  check(rejected(Endpoint::completions, completion({{"suffix", "end"}})), "suffix", "not supported");
}

TEST_CASE("openai request: logprobs and top_logprobs, n_probs, with their ranges", "[http][openai_request]") {
  // Completions: an integer 0..5, the alternatives; any integer asks for the chosen tokens' logprobs.
  auto r = accepted(Endpoint::completions, completion());
  CHECK_FALSE(r.sampling.logprobs);
  r = accepted(Endpoint::completions, completion({{"logprobs", 0}}));
  CHECK(r.sampling.logprobs);
  CHECK(r.sampling.top_logprobs == 0);
  r = accepted(Endpoint::completions, completion({{"logprobs", 5}}));
  CHECK(r.sampling.logprobs);
  CHECK(r.sampling.top_logprobs == 5);
  check(rejected(Endpoint::completions, completion({{"logprobs", 6}})), "logprobs",
        "\"logprobs\" is 6; it must be an integer in 0..5");
  check(rejected(Endpoint::completions, completion({{"logprobs", -1}})), "logprobs", "in 0..5");
  check(rejected(Endpoint::completions, completion({{"logprobs", true}})), "logprobs", "must be an integer");
  // Chat: a boolean, and top_logprobs 0..20 with it.
  r = accepted(Endpoint::chat, chat({{"logprobs", true}, {"top_logprobs", 20}}));
  CHECK(r.sampling.logprobs);
  CHECK(r.sampling.top_logprobs == 20);
  r = accepted(Endpoint::chat, chat({{"logprobs", false}, {"top_logprobs", 0}}));
  CHECK_FALSE(r.sampling.logprobs);
  check(rejected(Endpoint::chat, chat({{"logprobs", 1}})), "logprobs", "must be a boolean");
  check(rejected(Endpoint::chat, chat({{"logprobs", true}, {"top_logprobs", 21}})), "top_logprobs",
        "\"top_logprobs\" is 21; it must be an integer in 0..20");
  check(rejected(Endpoint::chat, chat({{"logprobs", true}, {"top_logprobs", 1.5}})), "top_logprobs",
        "must be an integer");
  check(rejected(Endpoint::chat, chat({{"top_logprobs", 3}})), "top_logprobs", "needs \"logprobs\": true");
  // llama-server's n_probs asks for that many alternatives, on either route; with the OpenAI fields it
  // must agree.
  r = accepted(Endpoint::chat, chat({{"n_probs", 7}}));
  CHECK(r.sampling.logprobs);
  CHECK(r.sampling.top_logprobs == 7);
  r = accepted(Endpoint::completions, completion({{"n_probs", 3}, {"logprobs", 3}}));
  CHECK(r.sampling.top_logprobs == 3);
  check(rejected(Endpoint::completions, completion({{"n_probs", 3}, {"logprobs", 2}})), "n_probs",
        "send one of them");
  check(rejected(Endpoint::chat, chat({{"n_probs", 21}})), "n_probs", "in 0..20");
  check(rejected(Endpoint::chat, chat({{"n_probs", "5"}})), "n_probs", "must be an integer");
}

TEST_CASE("openai request: presence, frequency and repetition penalties, with their ranges",
          "[http][openai_request]") {
  for (Endpoint e : {Endpoint::completions, Endpoint::chat}) {
    auto body = [&](json fields) { return e == Endpoint::chat ? chat(fields) : completion(fields); };
    const auto s =
        accepted(e,
                 body({{"presence_penalty", 0.5}, {"frequency_penalty", -1.25}, {"repetition_penalty", 1.1}}))
            .sampling;
    CHECK(s.presence_penalty == 0.5f);
    CHECK(s.frequency_penalty == -1.25f);
    CHECK(s.repetition_penalty == 1.1f);
    const auto none = accepted(e, body({{"presence_penalty", nullptr}})).sampling;
    CHECK_FALSE(none.penalized());
    CHECK(none.repetition_penalty == 1);
    CHECK(accepted(e, body({{"presence_penalty", -2}, {"frequency_penalty", 2}, {"repetition_penalty", 2}}))
              .sampling.penalized());
    check(rejected(e, body({{"presence_penalty", 2.5}})), "presence_penalty",
          "\"presence_penalty\" is 2.5; it must be in [-2, 2]");
    check(rejected(e, body({{"frequency_penalty", -2.01}})), "frequency_penalty", "it must be in [-2, 2]");
    check(rejected(e, body({{"frequency_penalty", "0"}})), "frequency_penalty",
          "\"frequency_penalty\" must be a number in [-2, 2], got string");
    check(rejected(e, body({{"repetition_penalty", 0}})), "repetition_penalty",
          "\"repetition_penalty\" is 0; it must be in (0, 2]");
    check(rejected(e, body({{"repetition_penalty", -1}})), "repetition_penalty", "it must be in (0, 2]");
    check(rejected(e, body({{"repetition_penalty", 2.5}})), "repetition_penalty", "it must be in (0, 2]");
    check(rejected(e, body({{"repetition_penalty", 1e-50}})), "repetition_penalty", "it must be in (0, 2]");
    check(rejected(e, body({{"repetition_penalty", true}})), "repetition_penalty", "must be a number");
  }
}

TEST_CASE("openai request: llama-server's fields are honoured, harmless or refused by name",
          "[http][openai_request]") {
  // Each at llama-server's "off" value, and the knobs of samplers that are off: accepted on both routes.
  const json harmless = {{"grammar", ""},
                         {"grammar_lazy", false},
                         {"grammar_triggers", json::array()},
                         {"preserved_tokens", json::array()},
                         {"mirostat", 0},
                         {"typical_p", 1.0},
                         {"repeat_penalty", 1},
                         {"dry_multiplier", 0},
                         {"xtc_probability", 0.0},
                         {"dynatemp_range", 0},
                         {"min_keep", 0},
                         {"n_probs", 0},
                         {"post_sampling_probs", false},
                         {"ignore_eos", false},
                         {"n_predict", -1},
                         {"n_cmpl", 1},
                         {"n_indent", 0},
                         {"t_max_predict_ms", 0},
                         {"return_tokens", false},
                         {"timings_per_token", false},
                         {"return_progress", false},
                         {"response_fields", json::array()},
                         {"lora", json::array()},
                         {"image_data", json::array()},
                         {"chat_template_kwargs", json::object()},
                         {"repeat_last_n", 64},
                         {"dry_base", 1.75},
                         {"dry_allowed_length", 2},
                         {"dry_penalty_last_n", 64},
                         {"dry_sequence_breakers", {"\n"}},
                         {"xtc_threshold", 0.1},
                         {"mirostat_tau", 5.0},
                         {"mirostat_eta", 0.1},
                         {"dynatemp_exponent", 1.0},
                         {"n_keep", 4},
                         {"cache_prompt", true},
                         {"n_cache_reuse", 0},
                         {"id_slot", -1},
                         {"sse_ping_interval", 10}};
  accepted(Endpoint::completions, completion(harmless));
  accepted(Endpoint::chat, chat(harmless));
  // Anything that would change the answer is refused, naming the field and what it asks for.
  const std::vector<std::tuple<std::string, json, std::string>> refused{
      {"grammar_lazy", true, "lazy grammars"},
      {"grammar_triggers", {{{"type", 0}, {"value", "<tool>"}}}, "grammar_triggers"},
      {"preserved_tokens", {"<tool>"}, "preserved_tokens"},
      {"samplers", {"top_k", "temperature"}, "one fixed order"},
      {"mirostat", 2, "mirostat"},
      {"typical_p", 0.5, "typical_p"},
      {"repeat_penalty", 1.1, "repeat_last_n"},
      {"dry_multiplier", 0.8, "DRY"},
      {"xtc_probability", 0.5, "XTC"},
      {"dynatemp_range", 0.5, "dynamic temperature"},
      {"min_keep", 2, "min_keep"},
      {"post_sampling_probs", true, "post_sampling_probs"},
      {"n_predict", 32, "send max_tokens"},
      {"n_cmpl", 2, "n_cmpl"},
      {"n_indent", 4, "n_indent"},
      {"t_max_predict_ms", 100, "time limit"},
      {"return_tokens", true, "return_tokens"},
      {"timings_per_token", true, "timings_per_token"},
      {"return_progress", true, "return_progress"},
      {"response_fields", {"content"}, "response_fields"},
      {"lora", {{{"id", 0}, {"scale", 0.5}}}, "LoRA"},
      {"image_data", {{{"data", "x"}, {"id", 1}}}, "image_url"},
      {"chat_template_kwargs", {{"enable_thinking", false}}, "chat_template_kwargs"},
  };
  for (const auto& [name, value, what] : refused) {
    INFO(name);
    check(rejected(Endpoint::chat, chat({{name, value}})), name, what);
    check(rejected(Endpoint::completions, completion({{name, value}})), name, "is not supported by epd");
  }
  // Wrong types are named too, even for the fields without effect; null means absent.
  check(rejected(Endpoint::chat, chat({{"mirostat", "2"}})), "mirostat", "must be an integer");
  check(rejected(Endpoint::chat, chat({{"cache_prompt", 1}})), "cache_prompt", "must be a boolean");
  check(rejected(Endpoint::chat, chat({{"grammar", 5}})), "grammar", "must be a string (GBNF)");
  accepted(Endpoint::chat, chat({{"grammar", nullptr}, {"json_schema", nullptr}}));
  // ignore_eos is honoured (what the serving benchmarks send): on both routes, a boolean.
  CHECK(accepted(Endpoint::completions, completion({{"ignore_eos", true}})).ignore_eos);
  CHECK(accepted(Endpoint::chat, chat({{"ignore_eos", true}})).ignore_eos);
  CHECK_FALSE(accepted(Endpoint::chat, chat({{"ignore_eos", false}})).ignore_eos);
  check(rejected(Endpoint::chat, chat({{"ignore_eos", "yes"}})), "ignore_eos", "must be a boolean");
}

TEST_CASE("openai request: logit_bias, token ids to biases in [-100, 100]", "[http][openai_request]") {
  using Bias = std::vector<std::pair<uint32_t, float>>;
  CHECK(accepted(Endpoint::completions, completion({{"logit_bias", {{"50256", -100}, {"7", 2.5}}}}))
            .sampling.logit_bias == Bias{{50256, -100.0f}, {7, 2.5f}});
  CHECK(accepted(Endpoint::chat, chat({{"logit_bias", json::object()}})).sampling.logit_bias.empty());
  check(rejected(Endpoint::completions, completion({{"logit_bias", 1}})), "logit_bias", "must be an object");
  check(rejected(Endpoint::chat, chat({{"logit_bias", {{"x1", 1}}}})), "logit_bias",
        "key \"x1\" is not a token id");
  check(rejected(Endpoint::chat, chat({{"logit_bias", {{"-1", 1}}}})), "logit_bias", "is not a token id");
  check(rejected(Endpoint::chat, chat({{"logit_bias", {{"4294967296", 1}}}})), "logit_bias",
        "is not a token id");
  check(rejected(Endpoint::chat, chat({{"logit_bias", {{"5", 101}}}})), "logit_bias",
        "of token 5 is 101; it must be a number in [-100, 100]");
  check(rejected(Endpoint::chat, chat({{"logit_bias", {{"5", "1"}}}})), "logit_bias", "must be a number");
  json many = json::object();
  for (int i = 0; i < 1025; ++i) many[std::to_string(i)] = 1;
  check(rejected(Endpoint::chat, chat({{"logit_bias", many}})), "logit_bias",
        "has 1025 entries; at most 1024");
}

TEST_CASE("openai request: chat fields epd cannot honour", "[http][openai_request]") {
  accepted(Endpoint::chat, chat({{"logprobs", false},
                                 {"top_logprobs", 0},
                                 {"tools", json::array()},
                                 {"tool_choice", "none"},
                                 {"function_call", "auto"},
                                 {"response_format", {{"type", "text"}}},
                                 {"modalities", {"text"}},
                                 {"parallel_tool_calls", false},
                                 {"echo", true}}));  // not a chat field in OpenAI's API: ignored
  json tool = {{"type", "function"}, {"function", {{"name", "f"}}}};
  check(rejected(Endpoint::chat, chat({{"tools", tool}})), "tools", "must be an array of tools, got object");
  check(rejected(Endpoint::chat, chat({{"functions", {tool}}})), "functions", "send \"tools\"");
  check(rejected(Endpoint::chat, chat({{"function_call", "f"}})), "function_call", "send \"tool_choice\"");
  check(rejected(Endpoint::chat, chat({{"tool_choice", "required"}})), "tool_choice", "needs \"tools\"");
  check(rejected(Endpoint::chat, chat({{"response_format", {{"type", "xml"}}}})), "response_format.type",
        "\"response_format\" of type \"xml\" is not supported");
  check(rejected(Endpoint::chat, chat({{"response_format", json::object()}})), "response_format.type",
        "is required");
  check(rejected(Endpoint::chat, chat({{"response_format", "json"}})), "response_format",
        "must be an object");
  check(rejected(Endpoint::chat, chat({{"audio", {{"voice", "alloy"}}}})), "audio", "not supported");
  check(rejected(Endpoint::chat, chat({{"modalities", {"text", "audio"}}})), "modalities", "not supported");
}

TEST_CASE("openai request: text parts join with newlines, images as markers, typed markers refused",
          "[http][openai_request]") {
  auto r = accepted(Endpoint::chat, {{"messages",
                                      {{{"role", "user"},
                                        {"content",
                                         {{{"type", "text"}, {"text", "a"}},
                                          {{"type", "text"}, {"text", "b"}},
                                          {{"type", "image_url"}, {"image_url", {{"url", png_uri()}}}},
                                          {{"type", "text"}, {"text", "c"}}}}}}}});
  CHECK(r.messages.at(0).text == "a\nb<__media__>c");
  auto e = rejected(Endpoint::chat, json{{"messages", {{{"role", "user"}, {"content", "see <__media__>"}}}}});
  CHECK(e.status == 400);
  CHECK(e.param == "messages[0].content");
  e = rejected(
      Endpoint::chat,
      json{{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "<__media__>"}}}}}}}});
  CHECK(e.param == "messages[0].content[0].text");
}

TEST_CASE("openai request: chat messages with string and part contents", "[http][openai_request]") {
  auto r = accepted(Endpoint::chat,
                    {{"model", "m"},
                     {"messages",
                      {{{"role", "system"}, {"content", "Be brief."}},
                       {{"role", "developer"}, {"content", {{{"type", "text"}, {"text", "Rules."}}}}},
                       {{"role", "user"},
                        {"name", "ann"},
                        {"content",
                         {{{"type", "text"}, {"text", "What is"}},
                          {{"type", "image_url"}, {"image_url", {{"url", png_uri()}}}},
                          {{"type", "text"}, {"text", "this?"}},
                          {{"type", "image_url"}, {"image_url", png_uri(kRequestPng + "2")}}}}},
                       {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}}}}});
  CHECK(r.endpoint == Endpoint::chat);
  CHECK(r.prompt.empty());
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[0].text == "Be brief.");
  CHECK(r.messages[1].role == "developer");
  CHECK(r.messages[1].text == "Rules.");
  CHECK(r.messages[2].role == "user");
  // Joined as llama-server joins parts: each image as its marker, no "\n" next to one.
  CHECK(r.messages[2].text == "What is<__media__>this?<__media__>");
  REQUIRE(r.messages[2].media.size() == 2);
  CHECK(std::string(r.messages[2].media[0].bytes.begin(), r.messages[2].media[0].bytes.end()) == kRequestPng);
  CHECK(std::string(r.messages[2].media[1].bytes.begin(), r.messages[2].media[1].bytes.end()) ==
        kRequestPng + "2");
  CHECK(r.messages[3].role == "assistant");
  CHECK(r.messages[3].text.empty());
  CHECK(r.messages[3].media.empty());

  // detail is checked and otherwise ignored; an empty parts array is empty text.
  r = accepted(Endpoint::chat,
               user({{{"type", "image_url"}, {"image_url", {{"url", png_uri()}, {"detail", "low"}}}}}));
  CHECK(r.messages[0].media.size() == 1);
  CHECK(accepted(Endpoint::chat, user(json::array())).messages[0].text.empty());
  CHECK(accepted(Endpoint::chat, user("")).messages[0].text.empty());
}

TEST_CASE("openai request: the messages array and each message's role", "[http][openai_request]") {
  check(rejected(Endpoint::chat, json::object()), "messages", "\"messages\" is required");
  check(rejected(Endpoint::chat, {{"messages", "hi"}}), "messages",
        "must be an array of messages, got string");
  check(rejected(Endpoint::chat, {{"messages", json::array()}}), "messages", "must not be empty");
  json five = json::array();
  for (int i = 0; i < 5; ++i) five.push_back({{"role", "user"}, {"content", "x"}});
  check(rejected(Endpoint::chat, {{"messages", five}}), "messages", "holds 5 messages; the limit is 4", 413);
  check(rejected(Endpoint::chat, {{"messages", {"hi"}}}), "messages[0]", "must be an object with \"role\"");
  check(rejected(Endpoint::chat, {{"messages", {{{"content", "hi"}}}}}), "messages[0].role", "is required");
  check(rejected(Endpoint::chat, {{"messages", {{{"role", 1}, {"content", "hi"}}}}}), "messages[0].role",
        "must be a string, got number");
  check(rejected(Endpoint::chat, {{"messages", {{{"role", "robot"}, {"content", "hi"}}}}}),
        "messages[0].role",
        "is \"robot\"; it must be \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"");
  check(rejected(Endpoint::chat, {{"messages", {{{"role", "user"}}}}}), "messages[0].content", "is required");
  check(rejected(Endpoint::chat, {{"messages", {{{"role", "system"}, {"content", nullptr}}}}}),
        "messages[0].content", "is required");
  check(rejected(Endpoint::chat, user(5)), "messages[0].content",
        "must be a string or an array of content parts, got number");
  // Text over all messages is counted against max_prompt_bytes.
  json big = {{"messages",
               {{{"role", "system"}, {"content", std::string(60, 'a')}},
                {{"role", "user"}, {"content", std::string(41, 'b')}}}}};
  check(rejected(Endpoint::chat, big), "messages", "exceeds the limit of 100 bytes (at messages[1])", 413);
}

TEST_CASE("openai request: content parts and images", "[http][openai_request]") {
  check(rejected(Endpoint::chat, user({"hi"})), "messages[0].content[0]",
        "must be an object with a \"type\"");
  check(rejected(Endpoint::chat, user({{{"text", "hi"}}})), "messages[0].content[0].type", "is required");
  check(rejected(Endpoint::chat, user({{{"type", "text"}}})), "messages[0].content[0].text", "is required");
  check(rejected(Endpoint::chat, user({{{"type", "text"}, {"text", 1}}})), "messages[0].content[0].text",
        "must be a string");
  check(rejected(Endpoint::chat, user({{{"type", "file"}, {"file", json::object()}}})),
        "messages[0].content[0].type",
        "is \"file\"; epd takes \"text\", \"image_url\" and \"input_audio\" parts");
  // input_audio: OpenAI's shape, the bytes what the format says.
  const auto audio = [](json input) {
    return user({{{"type", "input_audio"}, {"input_audio", std::move(input)}}});
  };
  const std::vector<uint8_t> wav = {'R', 'I', 'F', 'F', 0x24, 0, 0, 0, 'W', 'A', 'V', 'E'},
                             mp3 = {'I', 'D', '3', 4, 0};
  check(rejected(Endpoint::chat, audio(json::object())), "messages[0].content[0].input_audio.format",
        "must be \"wav\" or \"mp3\"");
  check(rejected(Endpoint::chat, audio({{"format", "flac"}, {"data", base64_encode(wav)}})),
        "messages[0].content[0].input_audio.format", "must be \"wav\" or \"mp3\"");
  check(rejected(Endpoint::chat, audio({{"format", "wav"}})), "messages[0].content[0].input_audio.data",
        "is required");
  check(rejected(Endpoint::chat, audio({{"format", "wav"}, {"data", "%%"}})),
        "messages[0].content[0].input_audio.data", "base64");
  check(rejected(Endpoint::chat, audio({{"format", "mp3"}, {"data", base64_encode(wav)}})),
        "messages[0].content[0].input_audio.data", "is not an MP3 file");
  check(rejected(Endpoint::chat, audio({{"format", "wav"}, {"data", base64_encode(mp3)}})),
        "messages[0].content[0].input_audio.data", "is not a WAV (RIFF/WAVE) file");
  check(
      rejected(
          Endpoint::chat,
          {{"messages",
            {{{"role", "assistant"},
              {"content",
               {{{"type", "input_audio"}, {"input_audio", {{"format", "wav"}, {"data", "UklGRg=="}}}}}}}}}}),
      "messages[0].content[0].type", "audio is only allowed in user messages");
  {
    auto r = accepted(Endpoint::chat,
                      user({{{"type", "text"}, {"text", "Listen:"}},
                            {{"type", "input_audio"},
                             {"input_audio", {{"format", "wav"}, {"data", base64_encode(wav)}}}}}));
    REQUIRE(r.messages[0].media.size() == 1);
    CHECK(r.messages[0].media[0].audio);
    CHECK(r.messages[0].media[0].bytes == wav);
    CHECK(r.messages[0].text == "Listen:<__media__>");
  }
  check(rejected(Endpoint::chat,
                 {{"messages",
                   {{{"role", "system"},
                     {"content", {{{"type", "image_url"}, {"image_url", {{"url", png_uri()}}}}}}}}}}),
        "messages[0].content[0].type", "only allowed in user messages");
  check(rejected(Endpoint::chat, user({{{"type", "image_url"}}})), "messages[0].content[0].image_url",
        "is required");
  check(rejected(Endpoint::chat, user({{{"type", "image_url"}, {"image_url", json::object()}}})),
        "messages[0].content[0].image_url.url", "is required");
  check(rejected(Endpoint::chat, user({{{"type", "image_url"}, {"image_url", {{"url", 5}}}}})),
        "messages[0].content[0].image_url.url", "must be a data: URI string, got number");
  check(rejected(Endpoint::chat, user({{{"type", "image_url"}, {"image_url", 5}}})),
        "messages[0].content[0].image_url", "got number");
  check(rejected(Endpoint::chat,
                 user({{{"type", "image_url"}, {"image_url", {{"url", png_uri()}, {"detail", "ultra"}}}}})),
        "messages[0].content[0].image_url.detail", "must be \"auto\", \"low\" or \"high\"");
  check(rejected(Endpoint::chat,
                 user({{{"type", "image_url"}, {"image_url", {{"url", "https://example.com/cat.png"}}}}})),
        "messages[0].content[0].image_url.url", "image URLs are not fetched");
  check(
      rejected(Endpoint::chat, user({{{"type", "text"}, {"text", "x"}},
                                     {{"type", "image_url"}, {"image_url", "data:image/gif;base64,R0lG"}}})),
      "messages[0].content[1].image_url", "\"image/gif\" is not supported");
  check(rejected(Endpoint::chat,
                 user({{{"type", "image_url"}, {"image_url", png_uri(kRequestPng + std::string(60, 'x'))}}})),
        "messages[0].content[0].image_url", "exceeds the limit of 64 bytes", 413);
}

TEST_CASE("openai request: every rejection is 400 or 413 with a param", "[http][openai_request]") {
  // A sample of bodies from above, checked for the common contract in one place.
  std::vector<std::pair<Endpoint, json>> bodies = {
      {Endpoint::completions, {{"prompt", 1}}},
      {Endpoint::completions, completion({{"max_tokens", 0}})},
      {Endpoint::chat, chat({{"n", 9}})},
      {Endpoint::chat, chat({{"stop", {"", "x"}}})},
      {Endpoint::chat, user({{{"type", "image_url"}, {"image_url", "http://x"}}})},
  };
  for (const auto& [endpoint, body] : bodies) {
    INFO(body.dump());
    CHECK_FALSE(rejected(endpoint, body).param.empty());
  }
}

TEST_CASE("openai request: response_format, grammar and json_schema constrain the answer",
          "[http][openai_request]") {
  using Kind = Constraint::Kind;
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  for (Endpoint e : {Endpoint::completions, Endpoint::chat}) {
    auto body = [&](json extra) {
      return e == Endpoint::chat ? chat(std::move(extra)) : completion(std::move(extra));
    };
    CHECK(accepted(e, body(json::object())).constraint.kind == Kind::none);
    CHECK(accepted(e, body({{"response_format", {{"type", "text"}}}})).constraint.kind == Kind::none);
    CHECK(accepted(e, body({{"grammar", ""}})).constraint.kind == Kind::none);
    auto g = accepted(e, body({{"grammar", "root ::= \"yes\" | \"no\""}})).constraint;
    CHECK(g.kind == Kind::grammar);
    CHECK(g.text == "root ::= \"yes\" | \"no\"");
    CHECK(accepted(e, body({{"response_format", {{"type", "json_object"}}}})).constraint.kind ==
          Kind::json_object);
    auto s = accepted(e, body({{"response_format",
                                {{"type", "json_schema"},
                                 {"json_schema", {{"name", "n"}, {"strict", true}, {"schema", schema}}}}}}))
                 .constraint;
    CHECK(s.kind == Kind::json_schema);
    CHECK(json::parse(s.text) == schema);
    CHECK(s.param == "response_format.json_schema.schema");
    auto ls = accepted(e, body({{"json_schema", schema}})).constraint;  // llama-server's
    CHECK(ls.kind == Kind::json_schema);
    CHECK(ls.param == "json_schema");
    // llama-server's schema inside a json_object response_format.
    CHECK(accepted(e, body({{"response_format", {{"type", "json_object"}, {"schema", schema}}}}))
              .constraint.kind == Kind::json_schema);
  }
}

TEST_CASE("openai request: constraints of the wrong shape, too large or two at once are refused",
          "[http][openai_request]") {
  const json schema = {{"type", "object"}};
  auto js = [](json inner) {
    return json{{"response_format", {{"type", "json_schema"}, {"json_schema", inner}}}};
  };
  check(rejected(Endpoint::chat, chat(js(json::object()))), "response_format.json_schema.schema",
        "is required");
  check(rejected(Endpoint::chat, chat({{"response_format", {{"type", "json_schema"}}}})),
        "response_format.json_schema", "is required");
  check(rejected(Endpoint::chat, chat(js({{"schema", "object"}}))), "response_format.json_schema.schema",
        "must be an object (a JSON schema), got string");
  check(rejected(Endpoint::chat, chat(js({{"schema", schema}, {"name", 3}}))),
        "response_format.json_schema.name", "must be a string");
  check(rejected(Endpoint::chat, chat(js({{"schema", schema}, {"strict", "yes"}}))),
        "response_format.json_schema.strict", "must be a boolean");
  check(rejected(Endpoint::chat, chat({{"json_schema", 5}})), "json_schema", "must be an object");
  check(rejected(Endpoint::chat, chat({{"grammar", "root ::= \"a\""}, {"json_schema", schema}})),
        "json_schema", "\"grammar\" and \"json_schema\" both constrain the answer");
  check(rejected(Endpoint::chat,
                 chat({{"json_schema", schema}, {"response_format", {{"type", "json_object"}}}})),
        "response_format", "both constrain the answer");
  // Sizes: the grammar's text and the schema's JSON text, each at most kMaxConstraintBytes.
  Limits big = request_limits();
  const std::string long_grammar = "root ::= \"" + std::string(kMaxConstraintBytes, 'a') + "\"";
  auto r = parse_request(Endpoint::chat, chat({{"grammar", long_grammar}}).dump(), big);
  REQUIRE(std::holds_alternative<HttpError>(r));
  check(std::get<HttpError>(r), "grammar", "the limit is 65536 bytes");
  json wide = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 4000; ++i) wide["properties"]["p" + std::to_string(i)] = {{"type", "string"}};
  r = parse_request(Endpoint::chat, chat({{"json_schema", wide}}).dump(), big);
  REQUIRE(std::holds_alternative<HttpError>(r));
  check(std::get<HttpError>(r), "json_schema", "the limit is 65536 bytes");
  // Nesting deeper than the body's limit is refused before any schema is looked at.
  json deep = schema;
  for (int i = 0; i < 40; ++i) deep = {{"type", "array"}, {"items", deep}};
  CHECK(rejected(Endpoint::chat, chat({{"json_schema", deep}})).message.find("nest") != std::string::npos);
}

namespace tool_requests {

json tool(const std::string& name, json parameters = nullptr) {
  json f = {{"name", name}, {"description", "d"}};
  if (!parameters.is_null()) f["parameters"] = std::move(parameters);
  return {{"type", "function"}, {"function", std::move(f)}};
}

const json kParams = json::parse(R"({"type":"object","properties":{"city":{"type":"string"}}})");

}  // namespace tool_requests

TEST_CASE("openai request: tools, tool_choice and parallel_tool_calls", "[http][openai_request][tools]") {
  using namespace tool_requests;
  // Keys keep the client's order in the tool's text (the prompt shows it as sent).
  auto r = parse_request(
      Endpoint::chat,
      R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":)"
      R"({"name":"get_weather","parameters":{"type":"object","properties":{"z":{},"a":{}}}}}]})",
      request_limits());
  REQUIRE(std::holds_alternative<Request>(r));
  const Tools& t = std::get<Request>(r).tools;
  REQUIRE(t.tools.size() == 1);
  CHECK(t.tools[0].name == "get_weather");
  CHECK(
      t.tools[0].json ==
      R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"z":{},"a":{}}}}})");
  CHECK(t.tools[0].parameters == R"({"type":"object","properties":{"z":{},"a":{}}})");
  CHECK(t.choice == Tools::Choice::automatic);
  CHECK(t.parallel);

  auto none = accepted(Endpoint::chat, chat({{"tools", {tool("f")}}, {"tool_choice", "none"}}));
  CHECK(none.tools.choice == Tools::Choice::none);
  CHECK(none.tools.tools[0].parameters == R"({"type": "object"})");
  auto req = accepted(Endpoint::chat, chat({{"tools", {tool("f"), tool("g-2", kParams)}},
                                            {"tool_choice", "required"},
                                            {"parallel_tool_calls", false}}));
  CHECK(req.tools.choice == Tools::Choice::required);
  CHECK_FALSE(req.tools.parallel);
  auto named = accepted(Endpoint::chat,
                        chat({{"tools", {tool("f"), tool("g")}},
                              {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}}));
  CHECK(named.tools.choice == Tools::Choice::named);
  CHECK(named.tools.named == "g");
  // Without tools, "none" and "auto" are plain text, as before.
  CHECK(accepted(Endpoint::chat, chat({{"tool_choice", "auto"}})).tools.choice == Tools::Choice::none);
  // The completions route knows no tools: they are unknown fields there.
  CHECK(accepted(Endpoint::completions, completion({{"tools", 5}})).tools.tools.empty());
}

TEST_CASE("openai request: malformed and hostile tools are refused naming the field",
          "[http][openai_request][tools]") {
  using namespace tool_requests;
  check(rejected(Endpoint::chat, chat({{"tools", {5}}})), "tools[0]", "must be an object");
  check(rejected(Endpoint::chat, chat({{"tools", {{{"type", "code"}, {"function", {{"name", "f"}}}}}}})),
        "tools[0].type", "must be \"function\"");
  check(rejected(Endpoint::chat, chat({{"tools", {{{"type", "function"}}}}})), "tools[0].function",
        "is required");
  check(rejected(Endpoint::chat, chat({{"tools", {tool("f"), tool("bad name")}}})), "tools[1].function.name",
        "a name is 1 to 64");
  check(rejected(Endpoint::chat, chat({{"tools", {tool(std::string(65, 'a'))}}})), "tools[0].function.name",
        "a name is 1 to 64");
  check(rejected(Endpoint::chat, chat({{"tools", {tool("f"), tool("f")}}})), "tools[1].function.name",
        "two tools are named \"f\"");
  check(rejected(Endpoint::chat, chat({{"tools", {tool("f", "string")}}})), "tools[0].function.parameters",
        "must be an object");
  json strict = tool("f");
  strict["function"]["strict"] = "yes";
  check(rejected(Endpoint::chat, chat({{"tools", {strict}}})), "tools[0].function.strict",
        "must be a boolean");
  json many = json::array();
  for (size_t i = 0; i <= kMaxTools; ++i) many.push_back(tool("f" + std::to_string(i)));
  check(rejected(Endpoint::chat, chat({{"tools", many}})), "tools", "the limit is 128");
  json huge = tool("f");
  huge["function"]["description"] = std::string(kMaxToolsBytes, 'x');
  Limits roomy = request_limits();
  auto big = parse_request(Endpoint::chat, chat({{"tools", {huge}}}).dump(), roomy);
  REQUIRE(std::holds_alternative<HttpError>(big));
  check(std::get<HttpError>(big), "tools", "bytes of JSON; the limit is 65536");
  // Deeper than the body's limit: refused while parsing, before any tool is read.
  std::string deep = std::string(40, '[') + std::string(40, ']');
  auto d =
      parse_request(Endpoint::chat,
                    R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":)"
                    R"({"name":"f","parameters":{"type":"object","default":)" +
                        deep + "}}}]}",
                    roomy);
  REQUIRE(std::holds_alternative<HttpError>(d));
  CHECK(std::get<HttpError>(d).message.find("nested deeper") != std::string::npos);

  check(rejected(Endpoint::chat, chat({{"tools", {tool("f")}}, {"tool_choice", "sometimes"}})), "tool_choice",
        "it must be \"none\", \"auto\", \"required\"");
  check(rejected(Endpoint::chat,
                 chat({{"tools", {tool("f")}},
                       {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}})),
        "tool_choice.function.name", "\"g\", which is not in \"tools\"");
  check(rejected(Endpoint::chat, chat({{"tools", {tool("f")}}, {"tool_choice", {{"type", "function"}}}})),
        "tool_choice.function", "must be an object");
  check(rejected(Endpoint::chat, chat({{"tools", {tool("f")}}, {"parallel_tool_calls", 1}})),
        "parallel_tool_calls", "must be a boolean");
  // A forced call is a grammar: another constraint with it is ambiguous.
  check(rejected(Endpoint::chat, chat({{"tools", {tool("f")}},
                                       {"tool_choice", "required"},
                                       {"response_format", {{"type", "json_object"}}}})),
        "tool_choice", "send one of them");
  accepted(Endpoint::chat, chat({{"tools", {tool("f")}}, {"response_format", {{"type", "json_object"}}}}));
}

TEST_CASE("openai request: assistant tool_calls and tool messages", "[http][openai_request][tools]") {
  json call = {{"id", "call_1"},
               {"type", "function"},
               {"function", {{"name", "f"}, {"arguments", "{\"b\":1,\"a\":2}"}}}};
  auto r = accepted(Endpoint::chat, {{"messages",
                                      {{{"role", "user"}, {"content", "hi"}},
                                       {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
                                       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "42"}}}}});
  REQUIRE(r.messages.size() == 3);
  REQUIRE(r.messages[1].tool_calls.size() == 1);
  CHECK(r.messages[1].tool_calls[0].id == "call_1");
  CHECK(r.messages[1].tool_calls[0].name == "f");
  CHECK(r.messages[1].tool_calls[0].arguments == "{\"b\":1,\"a\":2}");
  CHECK(r.messages[2].role == "tool");
  CHECK(r.messages[2].tool_call_id == "call_1");
  CHECK(r.messages[2].text == "42");

  auto msgs = [](json m) { return json{{"messages", {std::move(m)}}}; };
  check(rejected(Endpoint::chat, msgs({{"role", "tool"}, {"content", "42"}})), "messages[0].tool_call_id",
        "is required");
  check(rejected(Endpoint::chat, msgs({{"role", "function"}, {"content", "42"}, {"name", "f"}})),
        "messages[0].role", "send role \"tool\"");
  check(rejected(Endpoint::chat, msgs({{"role", "user"}, {"content", "x"}, {"tool_calls", {call}}})),
        "messages[0].tool_calls", "only assistant messages");
  check(rejected(Endpoint::chat, msgs({{"role", "assistant"}, {"function_call", {{"name", "f"}}}})),
        "messages[0].function_call", "send \"tool_calls\"");
  json bad = call;
  bad["function"]["arguments"] = "[1, 2]";
  check(rejected(Endpoint::chat, msgs({{"role", "assistant"}, {"tool_calls", {bad}}})),
        "messages[0].tool_calls[0].function.arguments", "a JSON object's text");
  bad["function"]["arguments"] = json::object();
  check(rejected(Endpoint::chat, msgs({{"role", "assistant"}, {"tool_calls", {bad}}})),
        "messages[0].tool_calls[0].function.arguments", "must be a string");
  bad = call;
  bad["function"]["name"] = "a b";
  check(rejected(Endpoint::chat, msgs({{"role", "assistant"}, {"tool_calls", {bad}}})),
        "messages[0].tool_calls[0].function.name", "1 to 64");
  check(rejected(Endpoint::chat, msgs({{"role", "assistant"}, {"tool_calls", "x"}})),
        "messages[0].tool_calls", "must be an array of tool calls");
}
