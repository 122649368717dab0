// Function calling through the cluster and the official OpenAI Node SDK (tests/http/node/tools.mjs), on a
// generated ChatML checkpoint (the Hermes format; the test helpers write no Llama-3 checkpoint, and the
// demo model's 256-token context cannot hold the Hermes tools prompt, ~750 of its tokens): tool_choice
// "required" and a named function give tool_calls whose arguments validate against the tool's schema and
// equal epd-run --tools', plain and streamed, with n = 2; "auto" equals epd-run's answer whatever it is; a
// conversation with a past call and its tool result renders and answers with a call; hostile tools are a 400.
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
#include "llama_checkpoint.hpp"
#include "openai_support.hpp"

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

struct Case {
  std::string name;
  std::string prompt;
  json choice;             // tool_choice as the SDK sends it
  std::string run_choice;  // epd-run's --tool-choice
  bool parallel = false;
  uint32_t n = 1;
  bool must_call = true;
};

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
  INFO(c.name);
  const json out = epd_run_json(argv);
  json expect = {{"text", http::to_valid_utf8(codec.text(out["tokens"].get<std::vector<uint32_t>>()))},
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
                 {"n", c.n}};
  return {{"name", c.name}, {"params", params}, {"expect", expect}, {"must_call", c.must_call}};
}

// A past call and its result, then a question: rendered in the Hermes format and answered with a call.
json conversation() {
  json call = {{"id", "call_0"},
               {"type", "function"},
               {"function", {{"name", "find_shape"}, {"arguments", R"({"colour": "red", "count": 1})"}}}};
  json messages = json::array({{{"role", "system"}, {"content", "Use the tools."}},
                               {{"role", "user"}, {"content", "Is there a red shape?"}},
                               {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
                               {{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", "one red circle"}},
                               {{"role", "user"}, {"content", "And a blue one?"}}});
  return {{"name", "a conversation with a tool result"},
          {"params",
           {{"max_tokens", 200},
            {"messages", messages},
            {"tools", kTools},
            {"tool_choice", "required"},
            {"parallel_tool_calls", false}}},
          {"must_call", true}};
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

void serve(const std::string& gguf, const std::string& prompt, bool with_refusals) {
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
  const std::vector<Case> cases = {
      {"tool_choice required", prompt, "required", "required"},
      {"a named function", prompt, named, "describe"},
      {"tool_choice required with n = 2", prompt, "required", "required", false, 2},
      {"several calls allowed", prompt, "required", "required", true, 1, false},
      {"tool_choice auto", prompt, "auto", "auto", true, 1, false},
  };
  json spec = {{"cases", json::array()}};
  for (const auto& c : cases) spec["cases"].push_back(expectation(gguf, **codec, tools_file, c));
  spec["cases"].push_back(conversation());
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

// A generated checkpoint with room for the tools prompt, removed at the end.
struct Checkpoint {
  fs::path dir = fs::temp_directory_path() / ("epd-e2e-tools-" + std::to_string(::getpid()));
  std::string gguf;
  Checkpoint() {
    model::testing::CheckpointSpec spec;
    spec.chat = true;
    spec.context = 2048;  // the tools' system turn is ~1,000 tokens of this mostly byte-level vocabulary
    auto p = model::testing::write_llama_checkpoint(spec, dir);
    REQUIRE(p.ok());
    gguf = p->gguf;
  }
  ~Checkpoint() { fs::remove_all(dir); }
};

// kill -9 the decode in the middle of a streamed, forced call: the router resumes it on the other decode
// with the grammar rebuilt from the tokens so far, and the text held back before the kill is still there:
// the call equals epd-run's.
void resumed_after_decode_kill() {
  const Checkpoint ckpt;
  auto cfg = model::load_model_path(ckpt.gguf);
  REQUIRE(cfg.ok());
  auto codec = model::PromptCodec::for_model(*cfg);
  REQUIRE(codec.ok());
  const fs::path tools_file = ckpt.dir / "tools.json";
  std::ofstream(tools_file) << kTools.dump();
  const json want =
      expectation(ckpt.gguf, **codec, tools_file, {"resumed", "w300 w271", "required", "required"});
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
  CHECK(finish == "tool_calls");
  CHECK(attempts >= 2);
}

}  // namespace tools_e2e

TEST_CASE("tool calls on a generated ChatML checkpoint through the OpenAI SDK equal epd-run and validate") {
  const tools_e2e::Checkpoint ckpt;
  tools_e2e::serve(ckpt.gguf, "w300 w271", true);
}

TEST_CASE("a forced tool call survives a decode killed mid-answer: resumed with the held text kept",
          "[fault][multiproc]") {
  tools_e2e::resumed_after_decode_kill();
}
