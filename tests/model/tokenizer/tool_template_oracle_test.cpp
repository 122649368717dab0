// The families' own chat templates (llama.cpp's source bundle in the build tree, models/templates/) rendered
// by epd, that is by llama.cpp's Jinja engine as llama-server renders them, against Hugging Face's Jinja
// engine (tests/http/node/render_chat.mjs, what transformers.js runs templates with): multi-turn
// conversations with a system turn, and tools, past calls and their results where the template has them.
#include <catch2/catch.hpp>

#include <chrono>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

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
  {"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": {"type": "object",
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

std::string today(const char* format) {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&t, &local);
  std::ostringstream ss;
  ss << std::put_time(&local, format);
  return ss.str();
}

// The conversation as the oracle is given it: a call's missing content as "", as llama.cpp gives it to
// templates with tool calls (Qwen3's cannot take null there).
ojson for_oracle(ojson messages) {
  for (auto& m : messages)
    if (m["content"].is_null()) m["content"] = "";
  return messages;
}

void compare(const std::string& file, const std::string& bos, const std::string& eos,
             const std::vector<Case>& cases) {
  INFO(file);
  ScratchDir dir("tool_oracle");
  const std::string tmpl = read_text(fs::path(EPD_LLAMA_CPP_SRC) / "models/templates" / file);
  REQUIRE(!tmpl.empty());
  // What llama.cpp puts in every template's context besides the conversation.
  const ojson context = {
      {"date_string", today("%d %b %Y")}, {"datetime", today("%b %d %Y")}, {"enable_thinking", true}};
  ojson spec = {{"template", tmpl},
                {"bos_token", bos},
                {"eos_token", eos},
                {"context", context},
                {"conversations", ojson::array()}};
  for (const Case& c : cases) {
    ojson conv = {{"messages", for_oracle(c.messages)}};
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
        render_chat_text(tmpl, turns, bos, eos,
                         cases[i].tools ? std::span<const ChatTool>(tools) : std::span<const ChatTool>());
    INFO("oracle: " << rendered[i].dump());
    REQUIRE(rendered[i].is_string());
    if (!epd) FAIL(epd.error().detail);
    CHECK(*epd == rendered[i].get<std::string>());
  }
}

const ojson kCall = ojson::parse(
    R"({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}})");
const ojson kCall2 = ojson::parse(
    R"({"id": "call_2", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2.5, "tags": ["x", {"k": null}]}}})");
const ojson kSys = {{"role", "system"}, {"content", "You are terse."}};
const ojson kUser = {{"role", "user"}, {"content", "Weather in Paris?"}};

// system, user, assistant, user: every template takes this one.
ojson multi_turn(bool system) {
  ojson m = ojson::array();
  if (system) m.push_back(kSys);
  m.push_back({{"role", "user"}, {"content", " What is 2+2? "}});
  m.push_back({{"role", "assistant"}, {"content", "4"}});
  m.push_back({{"role", "user"}, {"content", "caf\u00e9 \u6771\u4eac \U0001F600\n\nAnd 3+3?"}});
  return m;
}

// Two calls, their two results, the answer and another question.
ojson with_calls(bool system) {
  ojson m = ojson::array();
  if (system) m.push_back(kSys);
  m.push_back(kUser);
  m.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {kCall, kCall2}}});
  m.push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"temp\": 21}"}});
  m.push_back({{"role", "tool"}, {"tool_call_id", "call_2"}, {"content", "3.5"}});
  m.push_back({{"role", "assistant"}, {"content", "21 C."}});
  m.push_back({{"role", "user"}, {"content", "And now?"}});
  return m;
}

TEST_CASE("Qwen2.5's template: turns, tools in the system turn, Hermes calls and results") {
  compare("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>",
          {{multi_turn(true), false},
           {multi_turn(false), false},  // the template's own default system prompt
           {ojson::array({kSys, kUser})},
           {with_calls(true)},
           {ojson::array({kSys,
                          kUser,
                          {{"role", "assistant"}, {"content", "Looking."}, {"tool_calls", {kCall}}},
                          {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}})},
           {with_calls(true), false}});  // past calls without tools offered now
}

TEST_CASE("Qwen3's template: turns, tools and calls") {
  compare("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>",
          {{multi_turn(true), false}, {ojson::array({kSys, kUser})}, {with_calls(true)}});
}

TEST_CASE("Llama-3.1's and Llama-3.2's templates: the date header, tools in the first user turn") {
  for (const char* file :
       {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja"}) {
    const ojson call_turns =
        ojson::array({kSys,
                      kUser,
                      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {kCall}}},
                      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"temp\": 21}"}},
                      {{"role", "assistant"}, {"content", "21 C."}},
                      {{"role", "user"}, {"content", "And now?"}}});
    compare(
        file, "<|begin_of_text|>", "<|eot_id|>",
        {{multi_turn(true), false}, {multi_turn(false), false}, {ojson::array({kSys, kUser})}, {call_turns}});
  }
}

TEST_CASE("Phi-3.5's and Mistral-Nemo's templates: turns with and without a system message") {
  compare("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>",
          {{multi_turn(true), false}, {multi_turn(false), false}});
  compare("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>",
          {{multi_turn(true), false}, {multi_turn(false), false}, {ojson::array({kSys, kUser})}});
}

TEST_CASE("Gemma-2's template: turns (it takes no system turn)") {
  compare("google-gemma-2-2b-it.jinja", "<bos>", "<eos>", {{multi_turn(false), false}});
}

}  // namespace tool_oracle
}  // namespace epd::model::test
