// OpenAI's Responses API and Anthropic's Messages API through their official SDKs (tests/http/node/
// wire_apis.mjs) against real clusters: every answer — plain, streamed, with an image, with a stop sequence,
// a forced function call, a json_schema, a conversation carrying an earlier call and its result — equals
// the same request through Chat Completions (one request model behind all three), count_tokens equals the
// chat's prompt length, the router's API key is taken as Bearer (OpenAI) and as X-Api-Key (Anthropic), and
// hostile bodies are a 400 naming the field.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "cluster.hpp"
#include "openai_support.hpp"
#include "tool_families.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace wire_e2e {

const std::string kPng = std::string(EPD_SOURCE_DIR) + "/tests/http/node/fixtures/checker.png";
const std::string kKey = "wire-apis-test-key";

json user(const std::string& text) {
  return json::array({{{"role", "user"}, {"content", text}}});
}

// A case of both APIs: the route's body and the same request as a chat body, plain and streamed.
void both_streams(json& cases, const std::string& name, const std::string& api, const json& params,
                  const json& chat, bool must_call = false, const std::string& stop_sequence = "") {
  for (bool stream : {false, true}) {
    cases.push_back({{"name", name + (stream ? ", streamed" : "")},
                     {"api", api},
                     {"params", params},
                     {"chat", chat},
                     {"stream", stream},
                     {"must_call", must_call}});
    if (!stop_sequence.empty()) cases.back()["expect_stop_sequence"] = stop_sequence;
  }
}

// The chat body both image cases mean: "Answer briefly." as the system turn, the question and the picture.
json chat_with_image(const std::string& q) {
  return {{"messages",
           {{{"role", "system"}, {"content", "Answer briefly."}},
            {{"role", "user"},
             {"content",
              {{{"type", "text"}, {"text", q}},
               {{"type", "image_url"}, {"image_url", {{"url", "@file:" + kPng}}}}}}}}},
          {"max_tokens", 10}};
}

// Plain text, an image, system text: the reference model ("tiny" preset, which takes an
// image and writes its ChatML-like template).
json text_cases() {
  json cases = json::array();
  const std::string q = "What is in the picture?";
  both_streams(cases, "a string", "responses", {{"input", q}, {"max_output_tokens", 12}},
               {{"messages", user(q)}, {"max_tokens", 12}});
  both_streams(cases, "instructions and an image", "responses",
               {{"instructions", "Answer briefly."},
                {"input",
                 {{{"role", "user"},
                   {"content",
                    {{{"type", "input_text"}, {"text", q}},
                     {{"type", "input_image"}, {"image_url", "@file:" + kPng}}}}}}},
                {"max_output_tokens", 10}},
               chat_with_image(q));
  both_streams(cases, "a string", "messages", {{"messages", user(q)}, {"max_tokens", 12}},
               {{"messages", user(q)}, {"max_tokens", 12}});
  both_streams(
      cases, "system blocks and an image", "messages",
      {{"system", {{{"type", "text"}, {"text", "Answer briefly."}}}},
       {"messages",
        {{{"role", "user"},
          {"content",
           {{{"type", "text"}, {"text", q}},
            {{"type", "image"},
             {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "@file:" + kPng}}}}}}}}},
       {"max_tokens", 10}},
      chat_with_image(q));
  return cases;
}

// Each must fail with a 400 whose message says `message`; Responses' errors also name `param`.
json refusals() {
  json out = json::array();
  auto add = [&](std::string name, std::string api, json params, std::string param, std::string message) {
    out.push_back({{"name", name}, {"api", api}, {"params", params}, {"param", param}, {"message", message}});
  };
  add("previous_response_id", "responses", {{"input", "hi"}, {"previous_response_id", "resp_1"}},
      "previous_response_id", "epd keeps no responses");
  add("store: true", "responses", {{"input", "hi"}, {"store", true}}, "store", "\"store\" must be false");
  add("a hosted tool", "responses", {{"input", "hi"}, {"tools", {{{"type", "web_search"}}}}}, "tools[0].type",
      "no hosted tools");
  add("an unknown input item", "responses", {{"input", {{{"type", "item_reference"}, {"id", "x"}}}}},
      "input[0].type", "\"input[0].type\" is \"item_reference\"");
  add("input of the wrong type", "responses", {{"input", 7}}, "input",
      "\"input\" must be a string or an array");
  add("a file image", "responses",
      {{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"file_id", "f"}}}}}}}},
      "input[0].content[0].file_id", "no files are kept");
  add("max_output_tokens 0", "responses", {{"input", "hi"}, {"max_output_tokens", 0}}, "max_output_tokens",
      "\"max_output_tokens\" is 0");
  add("an image that is not one", "responses",
      {{"input",
        {{{"role", "user"},
          {"content", {{{"type", "input_image"}, {"image_url", "data:image/png;base64,AAAA"}}}}}}}},
      "input[0].content[0].image_url", "input[0].content[0].image_url");
  add("a URL image", "messages",
      {{"max_tokens", 8},
       {"messages",
        {{{"role", "user"},
          {"content", {{{"type", "image"}, {"source", {{"type", "url"}, {"url", "http://x"}}}}}}}}}},
      "", "\"messages[0].content[0].source.type\" is \"url\"");
  add("an unknown block", "messages",
      {{"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", {{{"type", "document"}}}}}}}}, "",
      "\"messages[0].content[0].type\" is \"document\"");
  add("five stop sequences", "messages",
      {{"max_tokens", 8}, {"messages", user("hi")}, {"stop_sequences", {"a", "b", "c", "d", "e"}}}, "",
      "\"stop_sequences\" holds 5 strings");
  add("a system role in messages", "messages",
      {{"max_tokens", 8}, {"messages", {{{"role", "system"}, {"content", "x"}}}}}, "",
      "\"messages[0].role\" is \"system\"");
  add("a server tool", "messages",
      {{"max_tokens", 8},
       {"messages", user("hi")},
       {"tools", {{{"type", "web_search_20250305"}, {"name", "w"}}}}},
      "", "no server tools");
  add("max_tokens of the wrong type", "messages", {{"max_tokens", "8"}, {"messages", user("hi")}}, "",
      "\"max_tokens\" must be");
  return out;
}

// Tools: a generated ChatML checkpoint (Hermes calls; grammars need a GGUF vocabulary), small enums so a
// forced call ends within a few dozen tokens.
const json kFindShape = json::parse(R"({"type": "object", "properties": {
    "colour": {"type": "string", "enum": ["red", "green", "blue"]}, "count": {"type": "integer", "enum": [1, 2, 3]}},
    "required": ["colour", "count"], "additionalProperties": false})");

// `bias`: steering() of the checkpoint's family, on every forced call (all three wires take logit_bias).
json tool_cases(const json& bias) {
  json cases = json::array();
  const std::string q = "w300 w271";
  const json chat_tools = {{{"type", "function"},
                            {"function",
                             {{"name", "find_shape"},
                              {"description", "Find the shapes of a colour."},
                              {"parameters", kFindShape}}}}};
  const json chat_forced = {{"messages", user(q)}, {"max_tokens", 120},
                            {"tools", chat_tools}, {"tool_choice", "required"},
                            {"logit_bias", bias},  {"parallel_tool_calls", false}};
  both_streams(cases, "a forced function call", "responses",
               {{"input", q},
                {"max_output_tokens", 120},
                {"tools",
                 {{{"type", "function"},
                   {"name", "find_shape"},
                   {"description", "Find the shapes of a colour."},
                   {"parameters", kFindShape}}}},
                {"tool_choice", "required"},
                {"logit_bias", bias},
                {"parallel_tool_calls", false}},
               chat_forced, true);
  both_streams(cases, "a forced tool_use", "messages",
               {{"messages", user(q)},
                {"max_tokens", 120},
                {"tools",
                 {{{"name", "find_shape"},
                   {"description", "Find the shapes of a colour."},
                   {"input_schema", kFindShape}}}},
                {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}},
                {"logit_bias", bias}},
               chat_forced, true);
  // The checkpoint's answer to q has a space in its first 40 tokens: Anthropic reports which stop matched.
  both_streams(cases, "a stop sequence", "messages",
               {{"messages", user(q)}, {"max_tokens", 40}, {"stop_sequences", {"\n\n", " "}}},
               {{"messages", user(q)}, {"max_tokens", 40}, {"stop", {"\n\n", " "}}}, false, " ");
  const json schema = json::parse(R"({"type": "object", "properties": {"colour": {"type": "string",
      "enum": ["red", "blue"]}}, "required": ["colour"], "additionalProperties": false})");
  both_streams(
      cases, "text.format json_schema", "responses",
      {{"input", q},
       {"max_output_tokens", 60},
       {"text",
        {{"format", {{"type", "json_schema"}, {"name", "shape"}, {"schema", schema}, {"strict", true}}}}}},
      {{"messages", user(q)},
       {"max_tokens", 60},
       {"response_format",
        {{"type", "json_schema"},
         {"json_schema", {{"name", "shape"}, {"schema", schema}, {"strict", true}}}}}});
  // An earlier call and its result, as each API writes them (Mistral's template wants the answer next and
  // call ids of 9 characters).
  const std::string args = R"({"colour": "red", "count": 1})";
  const json chat_history = {
      {"messages",
       {{{"role", "user"}, {"content", "Is there a red shape?"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"id", "call00001"},
            {"type", "function"},
            {"function", {{"name", "find_shape"}, {"arguments", args}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "call00001"}, {"content", "one red circle"}}}},
      {"max_tokens", 400},
      {"tools", chat_tools},
      {"tool_choice", "required"},
      {"logit_bias", bias},
      {"parallel_tool_calls", false}};
  cases.push_back(
      {{"name", "a conversation with a call and its output"},
       {"api", "responses"},
       {"params",
        {{"input",
          {{{"role", "user"}, {"content", "Is there a red shape?"}},
           {{"type", "function_call"}, {"call_id", "call00001"}, {"name", "find_shape"}, {"arguments", args}},
           {{"type", "function_call_output"}, {"call_id", "call00001"}, {"output", "one red circle"}}}},
         {"max_output_tokens", 400},
         {"tools",
          {{{"type", "function"},
            {"name", "find_shape"},
            {"description", "Find the shapes of a colour."},
            {"parameters", kFindShape}}}},
         {"tool_choice", "required"},
         {"logit_bias", bias},
         {"parallel_tool_calls", false}}},
       {"chat", chat_history},
       {"stream", false},
       {"must_call", true}});
  cases.push_back(
      {{"name", "a conversation with tool_use and tool_result"},
       {"api", "messages"},
       {"params",
        {{"messages",
          {{{"role", "user"}, {"content", "Is there a red shape?"}},
           {{"role", "assistant"},
            {"content",
             {{{"type", "tool_use"},
               {"id", "call00001"},
               {"name", "find_shape"},
               {"input", json::parse(args)}}}}},
           {{"role", "user"},
            {"content",
             {{{"type", "tool_result"}, {"tool_use_id", "call00001"}, {"content", "one red circle"}}}}}}},
         {"max_tokens", 400},
         {"tools",
          {{{"name", "find_shape"},
            {"description", "Find the shapes of a colour."},
            {"input_schema", kFindShape}}}},
         {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}},
         {"logit_bias", bias}}},
       {"chat", chat_history},
       {"stream", true},
       {"must_call", true}});
  return cases;
}

void run_script(const Cluster& cluster, const json& spec, const std::string& key) {
  const fs::path file = fs::temp_directory_path() / ("epd-wire-apis-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << spec.dump(2);
  std::vector<std::string> argv = {"node",       node_sdk_dir() + "/wire_apis.mjs",
                                   "--base-url", cluster.base_url() + "/v1",
                                   "--spec",     file.string()};
  if (!key.empty()) argv.insert(argv.end(), {"--api-key", key});
  const auto r = run_command(argv);
  fs::remove(file);
  INFO(r.output);
  INFO(cluster.logs());
  CHECK(r.exit_code == 0);
  CHECK(r.output.find(" 0 failed") != std::string::npos);
}

void text_cases_with_key() {
  const std::string missing = node_sdk_missing();
  INFO(missing);
  REQUIRE(missing.empty());
  ClusterSpec cs;
  cs.backend = "shm";
  cs.api_key = kKey;
  Cluster cluster(cs);
  cluster.start();
  // The script also checks that a wrong key is refused on both, as each client sends it.
  run_script(cluster, {{"cases", text_cases()}, {"refusals", refusals()}}, kKey);
  cluster.wait_all_free();
}

void tool_cases_on_a_checkpoint() {
  const std::string missing = node_sdk_missing();
  INFO(missing);
  REQUIRE(missing.empty());
  const fs::path dir = fs::temp_directory_path() / ("epd-e2e-wire-" + std::to_string(::getpid()));
  // Mistral Nemo's format: a steered random model's forced answer is a call (tool_families.hpp).
  const std::string gguf = write_family_checkpoint(kMistralNemo, dir);
  {
    ClusterSpec cs;
    cs.model_path = gguf;
    cs.backend = "tcp";
    Cluster cluster(cs);
    cluster.start();
    run_script(cluster, {{"cases", tool_cases(steering(gguf, kMistralNemo, true))}}, "");
    cluster.wait_all_free();
  }
  fs::remove_all(dir);
}

}  // namespace wire_e2e

TEST_CASE("Responses and Anthropic Messages through their SDKs equal Chat Completions, with the API key") {
  wire_e2e::text_cases_with_key();
}

TEST_CASE("tools and json_schema through Responses and Anthropic Messages equal Chat Completions") {
  wire_e2e::tool_cases_on_a_checkpoint();
}
