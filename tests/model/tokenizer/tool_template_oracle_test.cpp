// Tools in the prompt against the checkpoints' own Jinja templates (Qwen2.5's for ChatML/Hermes, Llama-3.1's
// for Llama-3), from llama.cpp's source bundle in the build tree, rendered by Hugging Face's Jinja engine
// (tests/http/node/render_chat.mjs). epd never runs them but must write the same text.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "epd/model/chat_template.hpp"
#include "fixtures.hpp"

namespace epd::model::test {
namespace tool_oracle {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;  // the tools' key order reaches the prompt

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city, now.",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "caf\u00e9 \"quoted\""},
                  "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
   "properties": {"a": {"type": "integer"}, "b": {"type": "number"}, "tags": {"type": "array", "items": {}}}}}}
])");

std::vector<ChatTool> tools_of(const ojson& tools) {
  std::vector<ChatTool> out;
  for (const auto& t : tools)
    out.push_back(
        {t["function"]["name"], t.dump(), t["function"].value("parameters", ojson::object()).dump()});
  return out;
}

struct Case {
  ojson messages;  // OpenAI's shape, arguments as objects (what the templates are given)
  bool tools = true;
};

// The conversation as epd's turns: arguments as their JSON text, as a client sends them.
std::vector<ChatTurn> turns_of(const ojson& messages) {
  std::vector<ChatTurn> out;
  for (const auto& m : messages) {
    ChatTurn t{m["role"], m["content"].is_string() ? m["content"].get<std::string>() : ""};
    if (m.contains("tool_calls"))
      for (const auto& c : m["tool_calls"])
        t.tool_calls.push_back({c["id"], c["function"]["name"], c["function"]["arguments"].dump()});
    out.push_back(std::move(t));
  }
  return out;
}

void compare(ChatStyle style, const std::string& file, const std::string& bos,
             const std::vector<Case>& cases) {
  INFO(file);
  ScratchDir dir("tool_oracle");
  const std::string tmpl = read_text(fs::path(EPD_LLAMA_CPP_SRC) / "models/templates" / file);
  REQUIRE(!tmpl.empty());
  auto sniffed = pick_chat_style(tmpl, *make_byte_tokenizer());
  REQUIRE(sniffed.ok());
  REQUIRE(*sniffed == style);
  ojson spec = {{"template", tmpl}, {"bos_token", bos}, {"eos_token", ""}, {"conversations", ojson::array()}};
  for (const Case& c : cases) {
    ojson conv = {{"messages", c.messages}};
    if (c.tools) conv["tools"] = kTools;
    spec["conversations"].push_back(conv);
  }
  std::ofstream(dir.path() / "spec.json") << spec.dump();
  const fs::path out = dir.path() / "rendered.json", err = dir.path() / "node.err";
  const std::string cmd = "timeout 60 node " + std::string(EPD_SOURCE_DIR) +
                          "/tests/http/node/render_chat.mjs --input " + (dir.path() / "spec.json").string() +
                          " --output " + out.string() + " >" + err.string() + " 2>&1";
  if (std::system(cmd.c_str()) != 0) FAIL("render_chat.mjs failed: " + read_text(err));
  const ojson rendered = ojson::parse(read_text(out)).at("rendered");
  REQUIRE(rendered.size() == cases.size());
  const auto tools = tools_of(kTools);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("conversation " << i << ": " << cases[i].messages.dump());
    const auto turns = turns_of(cases[i].messages);
    auto epd =
        render_chat_text(style, turns, bos, "",
                         cases[i].tools ? std::span<const ChatTool>(tools) : std::span<const ChatTool>());
    REQUIRE(rendered[i].is_string());
    REQUIRE(epd.ok());
    CHECK(*epd == rendered[i].get<std::string>());
  }
}

const ojson kCall = ojson::parse(
    R"({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}})");
const ojson kCall2 = ojson::parse(
    R"({"id": "call_2", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2.5, "tags": ["x", {"k": null}]}}})");

TEST_CASE("tools render as Qwen2.5's template writes them in ChatML") {
  const ojson sys = {{"role", "system"}, {"content", "You are terse."}};
  const ojson user = {{"role", "user"}, {"content", "Weather in Paris?"}};
  std::vector<Case> cases = {
      {ojson::array({sys, user})},
      // Two calls, their two results in one user turn, then the answer and another question.
      {ojson::array({sys,
                     user,
                     {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {kCall, kCall2}}},
                     {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"temp\": 21}"}},
                     {{"role", "tool"}, {"tool_call_id", "call_2"}, {"content", "3.5"}},
                     {{"role", "assistant"}, {"content", "21 C."}},
                     {{"role", "user"}, {"content", "And now?"}}})},
      // Content and a call in one assistant turn.
      {ojson::array({sys,
                     user,
                     {{"role", "assistant"}, {"content", "Looking."}, {"tool_calls", {kCall}}},
                     {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}})},
  };
  // A past call and its result without tools offered now (tool_choice "none"): the template's else branch
  // writes Qwen's default system prompt when there is none, so this one has its own.
  cases.push_back({cases[1].messages, false});
  compare(ChatStyle::chatml, "Qwen-Qwen2.5-7B-Instruct.jinja", "", cases);
}

TEST_CASE("tools render as Llama-3.1's template writes them") {
  const ojson sys = {{"role", "system"}, {"content", " You are terse. "}};
  const ojson user = {{"role", "user"}, {"content", " Weather in Paris? "}};
  const std::vector<Case> cases = {
      {ojson::array({sys, user})},
      {ojson::array({user})},  // no system message: the date header alone
      {ojson::array({sys,
                     user,
                     {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {kCall}}},
                     {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"temp\": 21}"}},
                     {{"role", "assistant"}, {"content", "21 C."}},
                     {{"role", "user"}, {"content", "And now?"}}})},
  };
  compare(ChatStyle::llama3, "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", cases);
}

}  // namespace tool_oracle
}  // namespace epd::model::test
