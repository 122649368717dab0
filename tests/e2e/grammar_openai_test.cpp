// Structured output through the cluster and the official OpenAI Node SDK (tests/http/node/structured.mjs), on
// the committed demo model (with its vision tower) and on a generated ChatML checkpoint: llama-server's GBNF
// "grammar", response_format json_object and json_schema (strict), llama-server's "json_schema"; each answer
// equals epd-run's given the same grammar, JSON answers parse and validate, and hostile grammars and schemas
// (invalid, left-recursive, deep, huge, recursive $ref) are a 400 before any room is made.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cluster.hpp"
#include "epd/http/utf8.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "llama_checkpoint.hpp"
#include "openai_support.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace grammar_e2e {

const std::string kDemo = std::string(EPD_SOURCE_DIR) + "/tools/demo-model/out/";

struct Served {
  std::string gguf;
  std::string mmproj;  // empty: text only
  std::shared_ptr<const model::PromptCodec> codec;
};

Served served(const std::string& gguf, const std::string& mmproj) {
  auto cfg = model::load_model_path(gguf);
  REQUIRE(cfg.ok());
  auto c = model::PromptCodec::for_model(model::with_mmproj(*cfg, mmproj));
  REQUIRE(c.ok());
  return {gguf, mmproj, *c};
}

// A case: a chat turn (with an optional picture) or a completion, and its constraint as the SDK sends it
// and as epd-run takes it.
struct Case {
  std::string name;
  bool chat = true;
  std::string prompt;
  std::string image;               // a picture file (chat)
  json constraint;                 // the request fields that constrain the answer
  std::vector<std::string> flags;  // epd-run's equivalent
  int max_tokens = 40;
  bool json_answer = false;  // the answer must parse as a JSON object
  json schema = nullptr;     // and validate against this
};

// epd-run's answer under the same grammar: what the SDK must read.
json expectation(const Served& s, const Case& c) {
  std::vector<std::string> argv = {
      std::string(EPD_BIN_DIR) + "/epd-run", "--model",  s.gguf,  "--json", "--chunk", "64", "--max-tokens",
      std::to_string(c.max_tokens),          "--prompt", c.prompt};
  if (!s.mmproj.empty()) argv.insert(argv.end(), {"--mmproj", s.mmproj});
  if (c.chat) argv.push_back("--chat");
  if (!c.image.empty()) argv.insert(argv.end(), {"--image", c.image});
  argv.insert(argv.end(), c.flags.begin(), c.flags.end());
  INFO(c.name);
  const json out = epd_run_json(argv);
  const auto tokens = out["tokens"].get<std::vector<uint32_t>>();
  json params = {{"max_tokens", c.max_tokens}, {"temperature", 0}};
  params.update(c.constraint);
  if (c.chat) {
    json content = c.prompt;
    if (!c.image.empty())
      content = json::array({{{"type", "image_url"}, {"image_url", {{"url", "@file:" + c.image}}}},
                             {{"type", "text"}, {"text", c.prompt}}});
    params["messages"] = json::array({{{"role", "user"}, {"content", content}}});
  } else {
    params["prompt"] = c.prompt;
  }
  json spec = {{"name", c.name},
               {"endpoint", c.chat ? "chat" : "completions"},
               {"params", params},
               {"expect_text", http::to_valid_utf8(s.codec->text(tokens))},
               {"expect_finish", out["stopped_at_eos"].get<bool>() ? "stop" : "length"}};
  if (c.json_answer) {
    spec["json"] = true;
    CHECK(spec["expect_finish"] == "stop");  // room enough to finish: a cut answer need not parse
  }
  if (!c.schema.is_null()) spec["schema"] = c.schema;
  return spec;
}

// Requests that must be refused, each with a part of its message.
json refusals() {
  json out = json::array();
  auto add = [&](std::string name, json fields, std::string message) {
    json params = {{"max_tokens", 8}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    params.update(fields);
    out.push_back({{"name", name}, {"endpoint", "chat"}, {"params", params}, {"expect_message", message}});
  };
  add("an unterminated GBNF string", {{"grammar", "root ::= \"a"}},
      "invalid grammar: unexpected end of input");
  add("a GBNF rule that is not defined", {{"grammar", "root ::= missing"}}, "undefined rule 'missing'");
  add("a grammar without root", {{"grammar", "other ::= \"a\""}}, "invalid grammar");
  add("a left-recursive grammar", {{"grammar", "root ::= root \"a\" | \"a\""}}, "invalid grammar");
  add("an indirectly left-recursive grammar",
      {{"grammar", "root ::= a\na ::= b \"x\"\nb ::= a \"y\" | \"z\""}}, "invalid grammar");
  add("parentheses nested 10000 deep",
      {{"grammar", "root ::= " + std::string(10000, '(') + "\"a\"" + std::string(10000, ')')}},
      "deeper than 64");
  add("a grammar of 100000 bytes", {{"grammar", "root ::= \"" + std::string(100000, 'a') + "\""}},
      "the limit is 65536 bytes");
  add("a repetition beyond llama.cpp's bound", {{"grammar", "root ::= \"a\"{100000}"}}, "invalid grammar");
  add("a schema $ref to nothing", {{"json_schema", {{"$ref", "#/$defs/missing"}}}}, "JSON schema");
  add("a schema $ref to a remote document",
      {{"response_format",
        {{"type", "json_schema"},
         {"json_schema", {{"name", "r"}, {"schema", {{"$ref", "https://example.com/schema.json"}}}}}}}},
      "JSON schema");
  add("a schema that is only a reference to itself", {{"json_schema", {{"$ref", "#"}}}}, "unsupported $ref");
  add("a schema whose references only recurse",
      {{"json_schema",
        {{"$defs",
          {{"a", {{"anyOf", {{{"$ref", "#/$defs/b"}}, {{"type", "null"}}}}}},
           {"b", {{"$ref", "#/$defs/a"}}}}},
         {"$ref", "#/$defs/a"}}}},
      "left recursion");
  add("a string schema of 100000 characters", {{"json_schema", {{"type", "string"}, {"minLength", 100000}}}},
      "grammar");
  json deep = {{"type", "string"}};
  for (int i = 0; i < 40; ++i) deep = {{"type", "array"}, {"items", deep}};
  add("a schema nested 40 deep", {{"json_schema", deep}}, "nested deeper than");
  json wide = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 4000; ++i) wide["properties"]["p" + std::to_string(i)] = {{"type", "string"}};
  add("a schema of 4000 properties", {{"json_schema", wide}}, "the limit is 65536 bytes");
  add("two constraints at once",
      {{"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}},
      "both constrain the answer");
  return out;
}

void serve(const Served& s, const std::vector<Case>& cases, bool with_refusals) {
  const std::string missing = node_sdk_missing();
  INFO(missing);
  REQUIRE(missing.empty());  // fails, never skips, when the SDK cannot run
  json spec = {{"cases", json::array()}};
  for (const auto& c : cases) spec["cases"].push_back(expectation(s, c));
  if (with_refusals) spec["refusals"] = refusals();
  ClusterSpec cs;
  cs.model_path = s.gguf;
  cs.mmproj = s.mmproj;
  cs.backend = "shm";
  Cluster cluster(cs);
  cluster.start();
  const fs::path file =
      fs::temp_directory_path() / ("epd-grammar-cases-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << spec.dump(2);
  const auto r = run_command({"node", node_sdk_dir() + "/structured.mjs", "--base-url",
                              cluster.base_url() + "/v1", "--spec", file.string()});
  fs::remove(file);
  INFO(spec.dump(2));
  INFO(r.output);
  INFO(cluster.logs());
  CHECK(r.exit_code == 0);
  CHECK(r.output.find(" 0 failed") != std::string::npos);
  if (with_refusals) {
    // Refused at the router before any room: no prefill or decode ever saw a bad grammar (they would log
    // the room's failure).
    const std::string logs = cluster.logs();
    for (size_t pos = 0; pos < logs.size();) {
      const size_t end = std::min(logs.find('\n', pos), logs.size());
      const std::string line = logs.substr(pos, end - pos);
      pos = end + 1;
      if (line.starts_with("[prefill") || line.starts_with("[decode"))
        CHECK(line.find("grammar") == std::string::npos);
    }
  }
  cluster.wait_all_free();
  const std::string reports = cluster.stop_and_collect_sanitizer_reports();
  INFO(reports);
  CHECK(reports.empty());
}

const json kShapeSchema = {{"type", "object"},
                           {"properties",
                            {{"shape", {{"type", "string"}, {"enum", {"circle", "square", "triangle"}}}},
                             {"colour", {{"enum", {"red", "green", "blue", "yellow", "orange", "purple"}}}},
                             {"large", {{"type", "boolean"}}}}},
                           {"required", {"shape", "colour", "large"}},
                           {"additionalProperties", false}};

void demo_model() {
  const Served s = served(kDemo + "lm.gguf", kDemo + "mmproj.gguf");
  const std::string picture = kDemo + "eval-images/scene-2-0.png";
  const json strict = {{"type", "json_schema"},
                       {"json_schema", {{"name", "shape"}, {"strict", true}, {"schema", kShapeSchema}}}};
  const std::vector<Case> cases = {
      {"a GBNF yes or no",
       true,
       "Is there a triangle?",
       "",
       {{"grammar", "root ::= \"yes\" | \"no\""}},
       {"--grammar", "root ::= \"yes\" | \"no\""}},
      {"a GBNF answer about a picture",
       true,
       "What colour is the square?",
       picture,
       {{"grammar", "root ::= \"The square is \" (\"red\" | \"green\" | \"blue\" | \"yellow\") \".\""}},
       {"--grammar", "root ::= \"The square is \" (\"red\" | \"green\" | \"blue\" | \"yellow\") \".\""}},
      // A question the model, held to JSON, answers within the budget (`{}`): most of its answers, forced
      // into a JSON string, never close it.
      {"response_format json_object",
       true,
       "What colours do you know?",
       "",
       {{"response_format", {{"type", "json_object"}}}},
       {"--json-object"},
       40,
       true},
      {"response_format json_schema strict about a picture",
       true,
       "Describe the picture.",
       picture,
       {{"response_format", strict}},
       {"--json-schema", kShapeSchema.dump()},
       150,
       true,
       kShapeSchema},
      {"llama-server's json_schema on completions",
       false,
       "A large green circle",
       "",
       {{"json_schema", kShapeSchema}},
       {"--json-schema", kShapeSchema.dump()},
       150,
       true,
       kShapeSchema},
      // Sampled: every draw pays the full mask (greedy ones mostly keep the model's own choice).
      {"a sampled json_schema answer",
       true,
       "Describe the picture.",
       "",
       {{"json_schema", kShapeSchema}, {"temperature", 0.8}, {"seed", 3}},
       {"--json-schema", kShapeSchema.dump(), "--temperature", "0.8", "--seed", "3"},
       150,
       true,
       kShapeSchema},
  };
  serve(s, cases, true);
}

void generated_checkpoint() {
  const fs::path dir = fs::temp_directory_path() / ("epd-e2e-grammar-" + std::to_string(::getpid()));
  model::testing::CheckpointSpec spec;
  spec.chat = true;
  auto p = model::testing::write_llama_checkpoint(spec, dir);
  REQUIRE(p.ok());
  const Served s = served(p->gguf, "");
  const json flags = {{"type", "object"},
                      {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"enum", {1, 2, 3}}}}}},
                      {"required", {"ok", "n"}},
                      {"additionalProperties", false}};
  const std::vector<Case> cases = {
      {"a GBNF yes or no",
       true,
       "w300 w271",
       "",
       {{"grammar", "root ::= \"yes\" | \"no\""}},
       {"--grammar", "root ::= \"yes\" | \"no\""}},
      {"a GBNF of digits",
       false,
       "w310 w311",
       "",
       {{"grammar", "root ::= [0-9]+ \" w3\" [0-9] [0-9]"}},
       {"--grammar", "root ::= [0-9]+ \" w3\" [0-9] [0-9]"},
       12},
      {"response_format json_schema",
       true,
       "w290 w291?",
       "",
       {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "f"}, {"schema", flags}}}}}},
       {"--json-schema", flags.dump()},
       40,
       true,
       flags},
  };
  serve(s, cases, false);
  fs::remove_all(dir);
}

// kill -9 the decode under a sampled, grammar-constrained answer: the router resumes it from the tokens
// streamed so far on the other decode, whose grammar state is rebuilt from them; the answer is epd-run's.
void resumed_after_decode_kill() {
  const fs::path dir = fs::temp_directory_path() / ("epd-e2e-grammar-kill-" + std::to_string(::getpid()));
  model::testing::CheckpointSpec spec;
  spec.chat = true;
  auto p = model::testing::write_llama_checkpoint(spec, dir);
  REQUIRE(p.ok());
  const Served s = served(p->gguf, "");
  // Fifteen pairs of word pieces, low then high: a state rebuilt at the root (or not at all) after an odd
  // number of pieces would draw a low one where a high one follows, and allow no end where one may come.
  const std::string grammar = "root ::= (\" w3\" [0-4] [0-9] \" w3\" [5-9] [0-9]){15}";
  constexpr int kTokens = 40;
  Case c{"resumed",
         false,
         "w300 w271",
         "",
         {{"grammar", grammar}, {"temperature", 0.9}, {"seed", 11}},
         {"--grammar", grammar, "--temperature", "0.9", "--seed", "11"},
         kTokens};
  const json want = expectation(s, c);
  ClusterSpec cs;
  cs.model_path = s.gguf;
  cs.backend = "shm";
  cs.decodes = 2;
  cs.defaults["decode"] = "step_delay_ms = 25\n";  // ~1 s per answer: time to kill the decode mid-answer
  Cluster cluster(cs);
  cluster.start();
  json body = want["params"];
  std::pair<int, std::string> answer;
  std::jthread client([&] { answer = cluster.post_raw("/v1/completions", body.dump()); });
  std::string victim;
  for (int i = 0; i < 400 && victim.empty(); ++i) {
    for (const auto& inst : cluster.instances())
      if (inst.value("role", "") == "decode" && inst.value("active_rooms", 0) > 0)
        victim = inst.value("id", "");
    if (victim.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE_FALSE(victim.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // a few tokens out
  REQUIRE(::kill(cluster.pid(victim), SIGKILL) == 0);
  client.join();
  INFO("killed " << victim << "; answer: " << answer.second << "\nwant: " << want.dump());
  REQUIRE(answer.first == 200);
  const json j = json::parse(answer.second);
  CHECK(j["choices"][0]["text"] == want["expect_text"]);
  CHECK(j["epd"]["attempts"].get<int>() >= 2);
  fs::remove_all(dir);
}

}  // namespace grammar_e2e

TEST_CASE("structured output on the demo model through the OpenAI SDK equals epd-run and validates") {
  grammar_e2e::demo_model();
}

TEST_CASE("structured output on a generated checkpoint through the OpenAI SDK equals epd-run") {
  grammar_e2e::generated_checkpoint();
}

TEST_CASE("structured output survives a decode killed mid-answer: resumed with the grammar rebuilt",
          "[fault][multiproc]") {
  grammar_e2e::resumed_after_decode_kill();
}

TEST_CASE("structured output on the reference model is a 400: it has no vocabulary llama.cpp reads") {
  epd::testing::ClusterSpec cs;  // the tiny preset
  epd::testing::Cluster cluster(cs);
  cluster.start();
  for (const json& extra :
       {json{{"grammar", "root ::= \"a\""}}, json{{"response_format", {{"type", "json_object"}}}}}) {
    json body = {{"prompt", "x"}, {"max_tokens", 4}};
    body.update(extra);
    const auto [status, reply] = cluster.post_raw("/v1/completions", body.dump());
    INFO(reply);
    CHECK(status == 400);
    CHECK_THAT(reply, Catch::Contains("takes no grammar"));
  }
}
