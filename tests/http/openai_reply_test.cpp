// The OpenAI bodies and SSE events, compared with the shapes OpenAI documents (key order included).
#include "epd/http/openai_reply.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace epd::http;
using namespace epd::http::openai;
using ordered = nlohmann::ordered_json;

namespace {

ResponseHead head(Endpoint endpoint) {
  return {endpoint, response_id(endpoint, "42"), 1700000000, "epd-tiny"};
}

Extras extras() {
  return {"req-7", 0xfedcba9876543210ull, 2, 5.5, 12.25};
}

// The JSON payloads of a run of SSE events, checking the framing on the way; "[DONE]" stays a string.
std::vector<ordered> events(std::string_view sse) {
  std::vector<ordered> out;
  while (!sse.empty()) {
    REQUIRE(sse.starts_with("data: "));
    size_t end = sse.find("\n\n");
    REQUIRE(end != std::string_view::npos);
    auto payload = sse.substr(6, end - 6);
    CHECK(payload.find('\n') == std::string_view::npos);  // one line per event
    out.push_back(payload == "[DONE]" ? ordered("[DONE]") : ordered::parse(payload));
    sse.remove_prefix(end + 2);
  }
  return out;
}

}  // namespace

TEST_CASE("openai reply: error bodies and their types", "[http][openai_reply]") {
  CHECK(
      error_body({400, "invalid_request", "\"n\" is 2", "n"}) ==
      R"({"error":{"message":"\"n\" is 2","type":"invalid_request_error","param":"n","code":"invalid_request"}})");
  CHECK(error_body({504, "timeout", "request timed out"}) ==
        R"({"error":{"message":"request timed out","type":"server_error","param":null,"code":"timeout"}})");
  CHECK(error_type(400) == "invalid_request_error");
  CHECK(error_type(404) == "invalid_request_error");
  CHECK(error_type(413) == "invalid_request_error");
  CHECK(error_type(429) == "requests");
  CHECK(error_type(500) == "server_error");
  CHECK(error_type(503) == "server_error");
  // Whatever the message holds, the body is valid JSON.
  auto j = ordered::parse(error_body({400, "invalid_request", "quote \" newline \n bad \xff"}));
  CHECK(j["error"]["message"] == "quote \" newline \n bad \xEF\xBF\xBD");
  CHECK(ordered::parse(error_body({500, "", "x"}))["error"]["code"].is_null());
}

TEST_CASE("openai reply: ids carry OpenAI's prefixes", "[http][openai_reply]") {
  CHECK(response_id(Endpoint::completions, "abc") == "cmpl-abc");
  CHECK(response_id(Endpoint::chat, "abc") == "chatcmpl-abc");
}

TEST_CASE("openai reply: a non-streamed text_completion", "[http][openai_reply]") {
  auto body = completion_body(head(Endpoint::completions), "Hello \"world\"\n", FinishReason::length, {5, 3},
                              extras());
  CHECK(body ==
        R"({"id":"cmpl-42","object":"text_completion","created":1700000000,"model":"epd-tiny",)"
        R"("choices":[{"text":"Hello \"world\"\n","index":0,"logprobs":null,"finish_reason":"length"}],)"
        R"("usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8},)"
        R"("epd":{"request_id":"req-7","room":18364758544493064720,"attempts":2,"first_token_ms":5.5,)"
        R"("total_ms":12.25}})");
}

TEST_CASE("openai reply: a non-streamed chat.completion", "[http][openai_reply]") {
  auto j = ordered::parse(completion_body(head(Endpoint::chat), "Hi \xF0\x9F\x98\x80", FinishReason::stop,
                                          {4294967295u, 1}, extras()));
  CHECK(j.dump() ==
        R"({"id":"chatcmpl-42","object":"chat.completion","created":1700000000,"model":"epd-tiny",)"
        R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hi )"
        "\xF0\x9F\x98\x80"
        R"(","refusal":null},"logprobs":null,"finish_reason":"stop"}],)"
        R"("usage":{"prompt_tokens":4294967295,"completion_tokens":1,"total_tokens":4294967296},)"
        R"("epd":{"request_id":"req-7","room":18364758544493064720,"attempts":2,"first_token_ms":5.5,)"
        R"("total_ms":12.25}})");
}

TEST_CASE("openai reply: SSE framing", "[http][openai_reply]") {
  CHECK(sse_data(R"({"a":1})") == "data: {\"a\":1}\n\n");
  CHECK(kSseDone == "data: [DONE]\n\n");
  StreamRenderer r(head(Endpoint::chat), false);
  CHECK(
      r.error({503, "out_of_capacity", "no free KV pages"}) ==
      "data: "
      R"({"error":{"message":"no free KV pages","type":"server_error","param":null,"code":"out_of_capacity"}})"
      "\n\ndata: [DONE]\n\n");
}

TEST_CASE("openai reply: a streamed chat answer", "[http][openai_reply]") {
  StreamRenderer r(head(Endpoint::chat), false);
  std::string sse = r.start();
  CHECK(r.start().empty());  // once
  sse += r.text("Hel");
  sse += r.text("");  // nothing
  sse += r.text("lo");
  sse += r.finish(FinishReason::stop, {3, 2}, extras());
  auto e = events(sse);
  REQUIRE(e.size() == 5);
  const std::string prefix = R"({"id":"chatcmpl-42","object":"chat.completion.chunk","created":1700000000,)"
                             R"("model":"epd-tiny","choices":[{"index":0,)";
  CHECK(e[0].dump() ==
        prefix + R"("delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
  CHECK(e[1].dump() == prefix + R"("delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}]})");
  CHECK(e[2].dump() == prefix + R"("delta":{"content":"lo"},"logprobs":null,"finish_reason":null}]})");
  CHECK(e[3].dump() == prefix + R"("delta":{},"logprobs":null,"finish_reason":"stop"}],)"
                                R"("epd":{"request_id":"req-7","room":18364758544493064720,"attempts":2,)"
                                R"("first_token_ms":5.5,"total_ms":12.25}})");
  CHECK(e[4] == "[DONE]");
  for (const auto& chunk : e) CHECK_FALSE((chunk.is_object() && chunk.contains("usage")));
}

TEST_CASE("openai reply: a streamed chat answer with include_usage", "[http][openai_reply]") {
  StreamRenderer r(head(Endpoint::chat), true);
  // No start(): the first text sends the role chunk first.
  std::string sse = r.text("Hi");
  sse += r.finish(FinishReason::length, {7, 1}, extras());
  auto e = events(sse);
  REQUIRE(e.size() == 5);
  CHECK(e[0]["choices"][0]["delta"] == ordered({{"role", "assistant"}, {"content", ""}}));
  CHECK(e[1]["choices"][0]["delta"]["content"] == "Hi");
  CHECK(e[2]["choices"][0]["finish_reason"] == "length");
  CHECK(e[2]["epd"]["attempts"] == 2);
  for (int i = 0; i < 3; ++i) {
    INFO(i);
    REQUIRE(e[i].contains("usage"));
    CHECK(e[i]["usage"].is_null());  // every chunk says "usage": null ...
  }
  // ... and the last one before [DONE] has no choices and the usage.
  CHECK(e[3].dump() == R"({"id":"chatcmpl-42","object":"chat.completion.chunk","created":1700000000,)"
                       R"("model":"epd-tiny","choices":[],)"
                       R"("usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}})");
  CHECK(e[4] == "[DONE]");
}

TEST_CASE("openai reply: a streamed completion", "[http][openai_reply]") {
  StreamRenderer r(head(Endpoint::completions), true);
  CHECK(r.start().empty());  // completions chunks carry no role
  std::string sse = r.text("Once");
  sse += r.text(" upon \"a\"");
  sse += r.finish(FinishReason::stop, {2, 2}, extras());
  auto e = events(sse);
  REQUIRE(e.size() == 5);
  const std::string prefix = R"({"id":"cmpl-42","object":"text_completion","created":1700000000,)"
                             R"("model":"epd-tiny","choices":[{"text":)";
  CHECK(e[0].dump() == prefix + R"("Once","index":0,"logprobs":null,"finish_reason":null}],"usage":null})");
  CHECK(e[1].dump() ==
        prefix + R"(" upon \"a\"","index":0,"logprobs":null,"finish_reason":null}],"usage":null})");
  CHECK(e[2].dump() == prefix + R"("","index":0,"logprobs":null,"finish_reason":"stop"}],"usage":null,)"
                                R"("epd":{"request_id":"req-7","room":18364758544493064720,"attempts":2,)"
                                R"("first_token_ms":5.5,"total_ms":12.25}})");
  CHECK(e[3]["object"] == "text_completion");
  CHECK(e[3]["choices"] == ordered::array());
  CHECK(e[3]["usage"]["total_tokens"] == 4);
  CHECK(e[4] == "[DONE]");
}

TEST_CASE("openai reply: an answer with no text still starts, finishes and ends", "[http][openai_reply]") {
  StreamRenderer r(head(Endpoint::chat), false);
  auto e = events(r.finish(FinishReason::stop, {1, 0}, extras()));
  REQUIRE(e.size() == 3);
  CHECK(e[0]["choices"][0]["delta"]["role"] == "assistant");
  CHECK(e[1]["choices"][0]["finish_reason"] == "stop");
  CHECK(e[2] == "[DONE]");
}

TEST_CASE("openai reply: n choices, each with its index, one usage for all", "[http][openai_reply]") {
  Extras second = extras();
  second.room = 9;
  const std::vector<Choice> choices{{"a", FinishReason::stop, extras()},
                                    {"bc", FinishReason::length, second}};
  auto j = ordered::parse(completion_body(head(Endpoint::chat), choices, {4, 3}));
  REQUIRE(j["choices"].size() == 2);
  CHECK(j["choices"][1]["index"] == 1);
  CHECK(j["choices"][1]["message"]["content"] == "bc");
  CHECK(j["choices"][1]["finish_reason"] == "length");
  CHECK(j["usage"]["total_tokens"] == 7);
  CHECK(j["epd"]["room"] == extras().room);  // the first choice's, and each one's under "choices"
  CHECK(j["epd"]["choices"][1]["room"] == 9);
  CHECK(ordered::parse(completion_body(head(Endpoint::completions), choices, {4, 3}))["choices"][1]["text"] ==
        "bc");

  // Streamed: a role chunk per choice first, then the choices' chunks in any order, each finish on its own,
  // then the usage and [DONE].
  StreamRenderer r(head(Endpoint::chat), true, 2);
  std::string sse = r.text("x", 1);
  sse += r.finish_choice(1, FinishReason::length, second);
  sse += r.text("y", 0);
  sse += r.finish_choice(0, FinishReason::stop, extras());
  sse += r.end({4, 2});
  auto e = events(sse);
  REQUIRE(e.size() == 8);
  CHECK(e[0]["choices"][0]["index"] == 0);
  CHECK(e[1]["choices"][0]["index"] == 1);
  CHECK(e[1]["choices"][0]["delta"]["role"] == "assistant");
  CHECK(e[2]["choices"][0]["index"] == 1);
  CHECK(e[2]["choices"][0]["delta"]["content"] == "x");
  CHECK(e[3]["choices"][0]["finish_reason"] == "length");
  CHECK(e[3]["epd"]["room"] == 9);
  CHECK(e[4]["choices"][0]["index"] == 0);
  CHECK(e[5]["choices"][0]["finish_reason"] == "stop");
  CHECK(e[6]["usage"]["completion_tokens"] == 2);
  CHECK(e[7] == "[DONE]");
}

namespace reply_logprobs_test {

// Values exact in binary, so the JSON text is predictable.
std::vector<TokenLogprob> two_tokens() {
  return {{{"Hi", -0.5f}, {{"Hi", -0.5f}, {"Ho", -1.25f}}},
          {{"\xC3\xA9!", -0.25f}, {{"\xC3\xA9!", -0.25f}, {"\xFF", -2.0f}}}};
}

}  // namespace reply_logprobs_test

TEST_CASE("openai reply: chat logprobs in OpenAI's shape, with each token's bytes", "[http][openai_reply]") {
  Choice c{"Hié!", FinishReason::stop, extras(), reply_logprobs_test::two_tokens()};
  auto body = ordered::parse(completion_body(head(Endpoint::chat), std::span(&c, 1), {3, 2}));
  CHECK(body["choices"][0]["logprobs"].dump() ==
        R"({"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[)"
        R"({"token":"Hi","logprob":-0.5,"bytes":[72,105]},{"token":"Ho","logprob":-1.25,"bytes":[72,111]}]},)"
        R"({"token":"é!","logprob":-0.25,"bytes":[195,169,33],"top_logprobs":[)"
        R"({"token":"é!","logprob":-0.25,"bytes":[195,169,33]},)"
        R"({"token":"�","logprob":-2.0,"bytes":[255]}]}],"refusal":null})");
  // Not asked for: null, as before.
  Choice plain{"Hi", FinishReason::stop, extras()};
  CHECK(ordered::parse(
            completion_body(head(Endpoint::chat), std::span(&plain, 1), {3, 1}))["choices"][0]["logprobs"]
            .is_null());
}

TEST_CASE("openai reply: completions logprobs, four lists with text offsets in code points",
          "[http][openai_reply]") {
  Choice c{"Hié!", FinishReason::length, extras(), reply_logprobs_test::two_tokens()};
  auto body = ordered::parse(completion_body(head(Endpoint::completions), std::span(&c, 1), {3, 2}));
  CHECK(body["choices"][0]["logprobs"].dump() ==
        R"({"tokens":["Hi","é!"],"token_logprobs":[-0.5,-0.25],)"
        R"("top_logprobs":[{"Hi":-0.5,"Ho":-1.25},{"é!":-0.25,"�":-2.0}],"text_offset":[0,2]})");
}

TEST_CASE("openai reply: streamed logprobs ride with their text, the rest with the finish chunk",
          "[http][openai_reply]") {
  const auto both = reply_logprobs_test::two_tokens();
  for (Endpoint endpoint : {Endpoint::chat, Endpoint::completions}) {
    StreamRenderer r(head(endpoint), false, 1, /*logprobs=*/true);
    std::string sse = r.start();
    sse += r.text("Hi", 0, std::span(both).first(1));
    sse += r.text("é", 0, {});  // text whose token's entry went out before: an empty list
    sse += r.finish_choice(0, FinishReason::stop, extras(), std::span(both).subspan(1));
    sse += r.end({3, 2});
    auto e = events(sse);
    const size_t first = endpoint == Endpoint::chat ? 1 : 0;  // the role chunk
    REQUIRE(e.size() == first + 4);
    const auto& lp0 = e[first]["choices"][0]["logprobs"];
    const auto& lp1 = e[first + 1]["choices"][0]["logprobs"];
    const auto& lp2 = e[first + 2]["choices"][0]["logprobs"];
    if (endpoint == Endpoint::chat) {
      CHECK(e[0]["choices"][0]["logprobs"].is_null());
      CHECK(lp0["content"].size() == 1);
      CHECK(lp0["content"][0]["token"] == "Hi");
      CHECK(lp1["content"].empty());
      CHECK(lp2["content"][0]["token"] == "é!");
      CHECK(lp2["content"][0]["top_logprobs"].size() == 2);
    } else {
      CHECK(lp0["text_offset"] == ordered::array({0}));
      CHECK(lp1["tokens"].empty());
      CHECK(lp2["tokens"] == ordered::array({"é!"}));
      CHECK(lp2["text_offset"] == ordered::array({2}));  // counts on from the earlier chunks
    }
  }
  // A finish chunk with no entries left says null.
  StreamRenderer r(head(Endpoint::chat), false, 1, true);
  auto e = events(r.finish_choice(0, FinishReason::stop, extras(), {}));
  CHECK(e.back()["choices"][0]["logprobs"].is_null());
}

TEST_CASE("openai reply: tool calls with null content and finish_reason tool_calls",
          "[http][openai_reply][tools]") {
  std::vector<Choice> choices(2);
  choices[0].finish = FinishReason::tool_calls;
  choices[0].text = " \n";
  choices[0].tool_calls = {{"call_a", "get_weather", R"({"city":"Paris"})"}, {"call_b", "add", "{}"}};
  choices[1].text = "Plain.";
  auto j = ordered::parse(completion_body(head(Endpoint::chat), choices, {5, 9}));
  CHECK(
      j["choices"][0]["message"].dump() ==
      R"({"role":"assistant","content":null,"refusal":null,"tool_calls":[)"
      R"({"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},)"
      R"({"id":"call_b","type":"function","function":{"name":"add","arguments":"{}"}}]})");
  CHECK(j["choices"][0]["finish_reason"] == "tool_calls");
  CHECK(j["choices"][1]["message"].dump() == R"({"role":"assistant","content":"Plain.","refusal":null})");
  // Text next to the calls stays the content.
  choices[0].text = "Checking.";
  auto k = ordered::parse(completion_body(head(Endpoint::chat), choices, {5, 9}));
  CHECK(k["choices"][0]["message"]["content"] == "Checking.");
}

TEST_CASE("openai reply: streamed tool calls go out one chunk per call with its index",
          "[http][openai_reply][tools]") {
  StreamRenderer r(head(Endpoint::chat), false, 2);
  std::string sse = r.start();
  const std::vector<epd::model::ToolCall> calls = {{"call_a", "f", R"({"x":1})"}, {"call_b", "g", "{}"}};
  sse += r.tool_calls(calls, 1);
  sse += r.finish_choice(1, FinishReason::tool_calls, extras());
  auto e = events(sse);
  REQUIRE(e.size() == 5);
  const std::string prefix = R"({"id":"chatcmpl-42","object":"chat.completion.chunk","created":1700000000,)"
                             R"("model":"epd-tiny","choices":[{"index":1,)";
  CHECK(e[2].dump() ==
        prefix +
            R"("delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function",)"
            R"("function":{"name":"f","arguments":"{\"x\":1}"}}]},"logprobs":null,"finish_reason":null}]})");
  CHECK(e[3]["choices"][0]["delta"]["tool_calls"][0]["index"] == 1);
  CHECK(e[3]["choices"][0]["delta"]["tool_calls"][0]["id"] == "call_b");
  CHECK(e[4]["choices"][0]["finish_reason"] == "tool_calls");
}
