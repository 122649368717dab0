// Function calling through the cluster and the official OpenAI Node SDK (tests/http/node/tools.mjs), as
// llama.cpp's chat layer does it for a family's own template (tool_families.hpp: random checkpoints with
// the bundle's Qwen 2.5, Mistral Nemo and Llama 3.2 templates, steered by logit_bias towards a call):
// tool_choice "required" and a named function, n = 2, parallel calls, "auto" steered and not, a
// conversation with a past call and its result — every answer (text, calls, finish) equals epd-run --tools',
// plain and streamed, and every finished call's arguments validate against its tool's schema; hostile tools
// are a 400; a forced call survives its decode's kill (resumed with the grammar rebuilt).
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cluster.hpp"
#include "epd/http/utf8.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/prompt_codec.hpp"
#include "openai_support.hpp"
#include "tool_families.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace tools_e2e {

// Small enums keep a forced call within a few dozen tokens of any model.
const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "find_shape", "description": "Find the shapes of a colour.",
   "parameters": {"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]},
                  "count": {"type": "integer", "enum": [1, 2, 3]}},
                  "required": ["colour", "count"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "describe", "description": "Describe the picture.",
   "parameters": {"type": "object", "properties": {"large": {"type": "boolean"}}, "required": ["large"],
                  "additionalProperties": false}}}
])");

// A family's chat template from llama.cpp's models/templates and the special tokens it writes.
struct Case {
  std::string name;
  std::string prompt;
  json choice;             // tool_choice as the SDK sends it
  std::string run_choice;  // epd-run's --tool-choice
  bool parallel = false;
  uint32_t n = 1;
  bool must_call = true;
  json bias = json::object();  // logit_bias, token id (as text) -> bias
};

// The special tokens whose text the answers keep (the format's markers), as the chat layer lists them.
std::vector<model::TokenId> preserved_of(const model::PromptCodec& codec) {
  std::vector<model::ChatTool> tools;
  for (const auto& t : kTools)
    tools.push_back({t["function"]["name"], t.dump(), t["function"]["parameters"].dump()});
  const std::vector<model::ChatTurn> turns = {{"user", "hi"}};
  auto r = codec.render(turns, tools);
  REQUIRE(r.ok());
  return model::preserved_ids(r->grammar, codec.tokenizer());
}

json expectation(const std::string& gguf, const model::PromptCodec& codec, const fs::path& tools_file,
                 const Case& c) {
  std::vector<std::string> argv = {std::string(EPD_BIN_DIR) + "/epd-run",
                                   "--model",
                                   gguf,
                                   "--json",
                                   "--chunk",
                                   "64",
                                   "--max-tokens",
                                   "200",
                                   "--chat",
                                   "--prompt",
                                   c.prompt,
                                   "--tools",
                                   tools_file.string(),
                                   "--tool-choice",
                                   c.run_choice};
  if (!c.parallel) argv.push_back("--one-tool-call");
  for (const auto& [id, b] : c.bias.items()) {
    argv.push_back("--logit-bias");
    argv.push_back(id + "=" + std::to_string(b.get<double>()));
  }
  INFO(c.name);
  const json out = epd_run_json(argv);
  INFO("epd-run: " << out.dump());
  // The text keeps the format's preserved tokens (<tool_call>, [TOOL_CALLS]) as the API's does.
  json expect = {{"text", http::to_valid_utf8(codec.text(out["tokens"].get<std::vector<uint32_t>>(), false,
                                                         preserved_of(codec)))},
                 {"finish", out["stopped_at_eos"].get<bool>() ? "stop" : "length"}};
  if (out.contains("tool_calls")) {
    expect["tool_calls"] = out["tool_calls"];
    expect["content"] = out["content"];
  }
  if (c.must_call) REQUIRE(expect.contains("tool_calls"));  // a forced call parses
  json params = {{"max_tokens", 200},
                 {"temperature", 0},
                 {"messages", json::array({{{"role", "user"}, {"content", c.prompt}}})},
                 {"tools", kTools},
                 {"tool_choice", c.choice},
                 {"parallel_tool_calls", c.parallel},
                 {"logit_bias", c.bias},
                 {"n", c.n}};
  return {{"name", c.name}, {"params", params}, {"expect", expect}, {"must_call", c.must_call}};
}

// A past call and its result (Mistral's templates want the answer next, and call ids of 9 characters):
// rendered in the family's format and answered with a call.
json conversation(const json& bias, bool must_call) {
  json call = {{"id", "call00001"},
               {"type", "function"},
               {"function", {{"name", "find_shape"}, {"arguments", R"({"colour": "red", "count": 1})"}}}};
  json messages =
      json::array({{{"role", "system"}, {"content", "Use the tools."}},
                   {{"role", "user"}, {"content", "Is there a red shape?"}},
                   {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
                   {{"role", "tool"}, {"tool_call_id", "call00001"}, {"content", "one red circle"}}});
  return {{"name", "a conversation with a tool result"},
          {"params",
           {{"max_tokens", 200},
            {"messages", messages},
            {"tools", kTools},
            {"tool_choice", "required"},
            {"logit_bias", bias},
            {"parallel_tool_calls", false}}},
          {"must_call", must_call}};
}

json refusals() {
  json out = json::array();
  auto add = [&](std::string name, json fields, std::string message) {
    json params = {{"max_tokens", 8}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    params.update(fields);
    out.push_back({{"name", name}, {"params", params}, {"expect_message", message}});
  };
  json bad = kTools;
  bad[0]["function"]["parameters"] = {{"$ref", "#/$defs/missing"}};
  add("a tool schema llama.cpp cannot convert", {{"tools", bad}}, "JSON schema");
  json twice = json::array({kTools[0], kTools[0]});
  add("two tools of one name", {{"tools", twice}}, "two tools are named \"find_shape\"");
  json huge = kTools;
  huge[1]["function"]["description"] = std::string(70000, 'x');
  add("tools of 70000 bytes", {{"tools", huge}}, "the limit is 65536");
  json deep = {{"type", "string"}};
  for (int i = 0; i < 40; ++i) deep = {{"type", "array"}, {"items", deep}};
  json deep_tools = kTools;
  deep_tools[1]["function"]["parameters"] = deep;
  add("a tool schema nested 40 deep", {{"tools", deep_tools}}, "nested deeper than");
  add("a named function that is not a tool",
      {{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
      "which is not in \"tools\"");
  add("a bad function name", {{"tools", {{{"type", "function"}, {"function", {{"name", "a b"}}}}}}},
      "1 to 64");
  add("tool_choice required without tools", {{"tool_choice", "required"}}, "needs \"tools\"");
  add("legacy functions", {{"functions", {kTools[0]["function"]}}}, "send \"tools\"");
  return out;
}

void serve(const std::string& gguf, const ToolFamily& family, const std::string& prompt, bool with_refusals) {
  const std::string missing = node_sdk_missing();
  INFO(missing);
  REQUIRE(missing.empty());
  auto cfg = model::load_model_path(gguf);
  REQUIRE(cfg.ok());
  auto codec = model::PromptCodec::for_model(*cfg);
  REQUIRE(codec.ok());
  const fs::path tools_file =
      fs::temp_directory_path() / ("epd-tools-" + std::to_string(::getpid()) + ".json");
  std::ofstream(tools_file) << kTools.dump();
  const json named = {{"type", "function"}, {"function", {{"name", "describe"}}}};
  const json forced = steering(**codec, family, true), marker = steering(**codec, family, false);
  const std::vector<Case> cases = {
      {"tool_choice required", prompt, "required", "required", false, 1, family.forces, forced},
      {"a named function", prompt, named, "describe", false, 1, family.forces, forced},
      {"tool_choice required with n = 2", prompt, "required", "required", false, 2, family.forces, forced},
      {"several calls allowed", prompt, "required", "required", true, 1, family.forces, forced},
      {"tool_choice auto", prompt, "auto", "auto", true, 1, false, marker},
      {"tool_choice auto, unsteered", prompt, "auto", "auto", true, 1, false},
  };
  json spec = {{"cases", json::array()}};
  for (const auto& c : cases) spec["cases"].push_back(expectation(gguf, **codec, tools_file, c));
  spec["cases"].push_back(conversation(forced, family.forces));
  if (with_refusals) spec["refusals"] = refusals();
  fs::remove(tools_file);
  ClusterSpec cs;
  cs.model_path = gguf;
  cs.backend = "shm";
  Cluster cluster(cs);
  cluster.start();
  const fs::path file =
      fs::temp_directory_path() / ("epd-tools-cases-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << spec.dump(2);
  const auto r = run_command({"node", node_sdk_dir() + "/tools.mjs", "--base-url", cluster.base_url() + "/v1",
                              "--spec", file.string()});
  fs::remove(file);
  INFO(spec.dump(2));
  INFO(r.output);
  INFO(cluster.logs());
  CHECK(r.exit_code == 0);
  CHECK(r.output.find(" 0 failed") != std::string::npos);
  cluster.wait_all_free();
  const std::string reports = cluster.stop_and_collect_sanitizer_reports();
  INFO(reports);
  CHECK(reports.empty());
}

// A generated checkpoint of a family, removed at the end.
struct Checkpoint {
  fs::path dir = fs::temp_directory_path() / ("epd-e2e-tools-" + std::to_string(::getpid()));
  std::string gguf;
  explicit Checkpoint(const ToolFamily& family) : gguf(write_family_checkpoint(family, dir)) {}
  ~Checkpoint() { fs::remove_all(dir); }
};

// kill -9 the decode in the middle of a streamed, forced call: the router resumes it on the other decode
// with the grammar rebuilt from the tokens so far, and the text held back before the kill is still there:
// the call equals epd-run's.
void resumed_after_decode_kill() {
  const Checkpoint ckpt(kMistralNemo);
  auto cfg = model::load_model_path(ckpt.gguf);
  REQUIRE(cfg.ok());
  auto codec = model::PromptCodec::for_model(*cfg);
  REQUIRE(codec.ok());
  const fs::path tools_file = ckpt.dir / "tools.json";
  std::ofstream(tools_file) << kTools.dump();
  const json want = expectation(ckpt.gguf, **codec, tools_file,
                                {"resumed", "w300 w271", "required", "required", false, 1, true,
                                 steering(**codec, kMistralNemo, true)});
  ClusterSpec cs;
  cs.model_path = ckpt.gguf;
  cs.backend = "shm";
  cs.decodes = 2;
  cs.defaults["decode"] = "step_delay_ms = 25\n";  // a few seconds per answer: time to kill mid-answer
  Cluster cluster(cs);
  cluster.start();
  json body = want["params"];
  body["stream"] = true;
  std::pair<int, std::string> answer;
  std::jthread client([&] { answer = cluster.post_raw("/v1/chat/completions", body.dump()); });
  std::string victim;
  for (int i = 0; i < 400 && victim.empty(); ++i) {
    for (const auto& inst : cluster.instances())
      if (inst.value("role", "") == "decode" && inst.value("active_rooms", 0) > 0)
        victim = inst.value("id", "");
    if (victim.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE_FALSE(victim.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // part of the call out, held back
  REQUIRE(::kill(cluster.pid(victim), SIGKILL) == 0);
  client.join();
  INFO("killed " << victim << "; answer: " << answer.second << "\nwant: " << want.dump());
  REQUIRE(answer.first == 200);
  json calls = json::array();
  int attempts = 0;
  std::string finish;
  for (size_t at = 0; (at = answer.second.find("data: ", at)) != std::string::npos;) {
    const size_t end = answer.second.find("\n\n", at);
    const json chunk = json::parse(answer.second.substr(at + 6, end - at - 6), nullptr, false);
    at = end;
    if (!chunk.is_object() || !chunk.contains("choices") || chunk["choices"].empty()) continue;
    const json& c = chunk["choices"][0];
    for (const auto& d : c["delta"].value("tool_calls", json::array()))
      calls.push_back({{"name", d["function"]["name"]}, {"arguments", d["function"]["arguments"]}});
    if (c["finish_reason"].is_string()) finish = c["finish_reason"];
    if (chunk.contains("epd")) attempts = chunk["epd"]["attempts"];
  }
  CHECK(calls == want["expect"]["tool_calls"]);
  // The random model writes Mistral's call id at length: max_tokens may end the answer after the call.
  CHECK(finish == (want["expect"]["finish"] == "length" ? "length" : "tool_calls"));
  CHECK(attempts >= 2);
}

}  // namespace tools_e2e

TEST_CASE("tool calls in Qwen 2.5's format through the OpenAI SDK equal epd-run and validate") {
  const tools_e2e::Checkpoint ckpt(kQwen25);
  tools_e2e::serve(ckpt.gguf, kQwen25, "w300 w271", true);
}

TEST_CASE("tool calls in Mistral Nemo's format through the OpenAI SDK equal epd-run and validate") {
  const tools_e2e::Checkpoint ckpt(kMistralNemo);
  tools_e2e::serve(ckpt.gguf, kMistralNemo, "w300 w271", false);
}

TEST_CASE("tool calls in Llama 3.2's format through the OpenAI SDK equal epd-run and validate") {
  const tools_e2e::Checkpoint ckpt(kLlama32);
  tools_e2e::serve(ckpt.gguf, kLlama32, "w300 w271", false);
}

TEST_CASE("a forced tool call survives a decode killed mid-answer: resumed with the held text kept",
          "[fault][multiproc]") {
  tools_e2e::resumed_after_decode_kill();
}
