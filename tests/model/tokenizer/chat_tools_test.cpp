// Tool calls at the model layer (epd/model/chat_tools.hpp): Python's JSON spelling, the Hermes and Llama-3
// renderings of tools, calls and results, and reading calls back out of an answer, whole and streamed.
#include <catch2/catch.hpp>

#include "epd/model/chat.hpp"
#include "epd/model/chat_template.hpp"
#include "epd/model/chat_tools.hpp"

namespace epd::model::test {
namespace chat_tools {

const std::vector<ChatTool> kTools = {
    {"get_weather",
     R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}})",
     R"({"type":"object","properties":{"city":{"type":"string"}}})"},
    {"add", R"({"type":"function","function":{"name":"add"}})", R"({"type":"object"})"},
};

TEST_CASE("python_json spells JSON as Jinja's tojson does, keys in their order") {
  auto flat = python_json(R"({"b":[1,2.5,"x"],"a":{},"c":[],"d":{"e":null,"f":true}})");
  REQUIRE(flat.ok());
  CHECK(*flat == R"({"b": [1, 2.5, "x"], "a": {}, "c": [], "d": {"e": null, "f": true}})");
  auto indented = python_json(R"({"a":[1,{"b":"caf\u00e9\n"}],"c":{}})", 4);
  REQUIRE(indented.ok());
  CHECK(*indented ==
        "{\n    \"a\": [\n        1,\n        {\n            \"b\": \"caf\xC3\xA9\\n\"\n        }\n    ],\n"
        "    \"c\": {}\n}");
  CHECK_FALSE(python_json("{oops").ok());
}

TEST_CASE("hermes calls parse from an answer: good, several, text around, malformed") {
  auto one = parse_tool_calls(
      ToolFormat::hermes,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", kTools);
  REQUIRE(one);
  REQUIRE(one->calls.size() == 1);
  CHECK(one->calls[0].name == "get_weather");
  CHECK(one->calls[0].arguments == R"({"city":"Paris"})");
  CHECK(one->content.empty());

  auto two = parse_tool_calls(
      ToolFormat::hermes,
      "Let me see.\n<tool_call>{\"name\": \"add\", \"arguments\": {\"b\": 2, \"a\": 1}}</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call> done",
      kTools);
  REQUIRE(two);
  REQUIRE(two->calls.size() == 2);
  CHECK(two->calls[0].arguments == R"({"b":2,"a":1})");  // the model's key order kept
  CHECK(two->calls[1].name == "get_weather");
  CHECK(two->content == "Let me see.\n\n done");

  for (const std::string bad : {
           "no calls at all",
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",  // cut by max_tokens
           "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>",            // not a tool
           "<tool_call>{\"name\": \"add\", \"arguments\": \"1, 2\"}</tool_call>",       // not an object
           "<tool_call>{\"name\": \"add\"}</tool_call>",
           "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call><tool_call>oops</tool_call>",
       }) {
    INFO(bad);
    CHECK_FALSE(parse_tool_calls(ToolFormat::hermes, bad, kTools));
  }
}

TEST_CASE("no format reads no calls") {
  CHECK_FALSE(parse_tool_calls(ToolFormat::none,
                               "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>", kTools));
}

// Pushes `pieces` one by one; returns the content that went out (pushes then finish) and the calls.
std::pair<std::string, std::vector<ToolCall>> stream(ToolFormat f, const std::vector<std::string>& pieces,
                                                     std::vector<std::string>* outs = nullptr) {
  ToolCallText t(f, kTools);
  std::string content;
  for (const auto& p : pieces) {
    std::string out = t.push(p);
    if (outs) outs->push_back(out);
    content += out;
  }
  auto end = t.finish();
  return {content + end.text, end.calls};
}

TEST_CASE("streamed hermes text holds back what could be a call and nothing else") {
  std::vector<std::string> outs;
  auto [content, calls] = stream(
      ToolFormat::hermes,
      {"Hi <", "b> and <tool", "_call>\n{\"name\": \"add\", ", "\"arguments\": {}}\n</tool_call>"}, &outs);
  CHECK(outs[0] == "Hi ");       // "<" could start a call
  CHECK(outs[1] == "<b> and ");  // "<b>" could not; "<tool" still could
  CHECK(outs[2].empty());
  CHECK(outs[3].empty());
  CHECK(content == "Hi <b> and ");
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].name == "add");

  // Not a call after all: every byte comes out, in order.
  auto [plain, none] = stream(ToolFormat::hermes, {"a <tool_", "call> is ", "a tag"});
  CHECK(plain == "a <tool_call> is a tag");
  CHECK(none.empty());
  auto [tail, none2] = stream(ToolFormat::hermes, {"ends with <tool_c"});
  CHECK(tail == "ends with <tool_c");
  CHECK(none2.empty());
}

TEST_CASE("the reference model writes tools calls and results in the Hermes format") {
  std::vector<ChatTurn> turns = {{"user", "Add 1 and 2."}, {"assistant", ""}, {"tool", "3"}, {"tool", "ok"}};
  turns[1].tool_calls = {{"call_9", "add", R"({"a":1,"b":2})"}};
  auto h = hermes_turns(turns, kTools);
  REQUIRE(h.ok());
  REQUIRE(h->size() == 4);
  CHECK((*h)[0].role == "system");
  CHECK(
      (*h)[0].text ==
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
      "function signatures within <tools></tools> XML tags:\n<tools>\n"
      R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})"
      "\n"
      R"({"type": "function", "function": {"name": "add"}})"
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call>");
  CHECK((*h)[2].text ==
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>");
  CHECK((*h)[3].role == "user");
  CHECK((*h)[3].text == "<tool_response>\n3\n</tool_response>\n<tool_response>\nok\n</tool_response>");
  ModelConfig cfg;
  cfg.max_seq = 4096;
  auto text = render_chat(cfg, *h);
  REQUIRE(text.ok());
  CHECK(text->rfind("<|im_start|>system\n# Tools", 0) == 0);
  CHECK(text->find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"add\"") != std::string::npos);
}

}  // namespace chat_tools
}  // namespace epd::model::test
