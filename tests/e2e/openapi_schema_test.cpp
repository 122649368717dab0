// Every answer is what OpenAI's own description says it is: the answers of running clusters — chat plain,
// with logprobs, n > 1, streamed chunks, json_schema, tools; completions plain and streamed; /v1/models; an
// error; Responses plain and every streamed event, with text and with a function call — validated against
// the schemas of OpenAI's OpenAPI document (tests/http/openapi/openai-schemas.json, cut by
// scripts/openapi-subset.py) by Debian's python3-jsonschema (tests/http/openapi/validate.py).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "cluster.hpp"
#include "llama_checkpoint.hpp"
#include "openai_support.hpp"
#include "tool_families.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace openapi_e2e {

const std::string kOpenApiDir = std::string(EPD_SOURCE_DIR) + "/tests/http/openapi";

json user(const std::string& text) {
  return json::array({{{"role", "user"}, {"content", text}}});
}

// The JSON of each "data: " line of a stream but [DONE].
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> out;
  for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const size_t end = body.find('\n', at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data != "[DONE]") out.push_back(json::parse(data));
  }
  return out;
}

// The $defs name of each Responses stream event epd sends.
std::string event_schema(const std::string& type) {
  static const std::map<std::string, std::string> names = {
      {"response.created", "ResponseCreatedEvent"},
      {"response.in_progress", "ResponseInProgressEvent"},
      {"response.output_item.added", "ResponseOutputItemAddedEvent"},
      {"response.output_item.done", "ResponseOutputItemDoneEvent"},
      {"response.content_part.added", "ResponseContentPartAddedEvent"},
      {"response.content_part.done", "ResponseContentPartDoneEvent"},
      {"response.output_text.delta", "ResponseTextDeltaEvent"},
      {"response.output_text.done", "ResponseTextDoneEvent"},
      {"response.reasoning_text.delta", "ResponseReasoningTextDeltaEvent"},
      {"response.reasoning_text.done", "ResponseReasoningTextDoneEvent"},
      {"response.function_call_arguments.delta", "ResponseFunctionCallArgumentsDeltaEvent"},
      {"response.function_call_arguments.done", "ResponseFunctionCallArgumentsDoneEvent"},
      {"response.completed", "ResponseCompletedEvent"},
      {"response.incomplete", "ResponseIncompleteEvent"},
      {"error", "ResponseErrorEvent"}};
  auto it = names.find(type);
  return it == names.end() ? "unknown event " + type : it->second;
}

// Collects answers and the schema each must meet.
class Answers {
 public:
  explicit Answers(const Cluster& c) : c_(c) {}

  void post(const std::string& label, const std::string& path, const json& body, const std::string& schema,
            int status = 200) {
    auto [got, text] = c_.post_raw(path, body.dump());
    INFO(label << ": " << text);
    REQUIRE(got == status);
    add(label, schema, json::parse(text));
  }

  // Every event of a streamed answer. OpenAI's streamed completions carry finish_reason null until the last
  // chunk, and response.created / in_progress a null usage: what OpenAI sends, though the document wants a
  // value there.
  void stream(const std::string& label, const std::string& path, const json& body,
              const std::string& schema) {
    auto [got, text] = c_.post_raw(path, body.dump());
    INFO(label << ": " << text);
    REQUIRE(got == 200);
    const auto events = sse_events(text);
    REQUIRE(events.size() >= 2);
    for (size_t i = 0; i < events.size(); ++i) {
      const json& e = events[i];
      const std::string name = schema.empty() ? event_schema(e.value("type", "")) : schema;
      json as_sent = json::array();
      if (path == "/v1/completions") as_sent.push_back("choices/*/finish_reason");
      if (name == "ResponseCreatedEvent" || name == "ResponseInProgressEvent")
        as_sent.push_back("response/usage");
      add(label + " event " + std::to_string(i), name, e, as_sent);
    }
  }

  void get(const std::string& label, const std::string& path, const std::string& schema) {
    auto [got, text] = c_.get_raw(path);
    REQUIRE(got == 200);
    add(label, schema, json::parse(text));
  }

  const json& cases() const { return cases_; }

 private:
  void add(const std::string& label, const std::string& schema, json instance, json as_sent = json::array()) {
    cases_.push_back(
        {{"label", label}, {"schema", schema}, {"instance", std::move(instance)}, {"null_as_sent", as_sent}});
  }

  const Cluster& c_;
  json cases_ = json::array();
};

void validate(const json& cases) {
  const fs::path file =
      fs::temp_directory_path() / ("epd-openapi-cases-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << cases.dump();
  const auto r = run_command({"/usr/bin/python3", kOpenApiDir + "/validate.py", file.string()});
  fs::remove(file);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find(std::to_string(cases.size()) + " valid, 0 invalid") != std::string::npos);
}

void check_answers() {
  const fs::path dir = fs::temp_directory_path() / ("epd-e2e-openapi-" + std::to_string(::getpid()));
  json cases = json::array();
  {
    // The reference model: chat, completions, models, errors, Responses text.
    ClusterSpec cs;
    cs.backend = "shm";
    Cluster cluster(cs);
    cluster.start();
    Answers a(cluster);
    const json m = user("What is in the picture?");
    a.post("chat", "/v1/chat/completions", {{"messages", m}, {"max_tokens", 6}},
           "CreateChatCompletionResponse");
    a.post("chat with logprobs", "/v1/chat/completions",
           {{"messages", m}, {"max_tokens", 6}, {"logprobs", true}, {"top_logprobs", 2}},
           "CreateChatCompletionResponse");
    a.post("chat n = 2", "/v1/chat/completions",
           {{"messages", m}, {"max_tokens", 6}, {"n", 2}, {"temperature", 1}},
           "CreateChatCompletionResponse");
    a.stream("chat streamed", "/v1/chat/completions",
             {{"messages", m},
              {"max_tokens", 6},
              {"stream", true},
              {"logprobs", true},
              {"stream_options", {{"include_usage", true}}}},
             "CreateChatCompletionStreamResponse");
    a.post("completion with logprobs", "/v1/completions",
           {{"prompt", "Hello"}, {"max_tokens", 6}, {"logprobs", 2}}, "CreateCompletionResponse");
    a.stream("completion streamed", "/v1/completions",
             {{"prompt", "Hello"}, {"max_tokens", 6}, {"stream", true}}, "CreateCompletionResponse");
    a.get("models", "/v1/models", "ListModelsResponse");
    a.post("an error", "/v1/chat/completions", {{"messages", m}, {"max_tokens", 0}}, "ErrorResponse", 400);
    a.post("an unknown model", "/v1/chat/completions", {{"messages", m}, {"model", "nope"}}, "ErrorResponse",
           404);
    a.post("response", "/v1/responses", {{"input", "Hello"}, {"max_output_tokens", 6}}, "Response");
    a.stream("response streamed", "/v1/responses",
             {{"input", "Hello"}, {"max_output_tokens", 6}, {"stream", true}}, "");
    a.post("a responses error", "/v1/responses", {{"input", "Hello"}, {"store", true}}, "ErrorResponse", 400);
    cases.insert(cases.end(), a.cases().begin(), a.cases().end());
    cluster.wait_all_free();
  }
  {
    // A generated checkpoint in Mistral Nemo's format, steered into its calls (tool_families.hpp):
    // json_schema and tools (grammars need a GGUF vocabulary).
    const std::string gguf = write_family_checkpoint(kMistralNemo, dir);
    const json bias = steering(gguf, kMistralNemo, true);
    ClusterSpec cs;
    cs.model_path = gguf;
    cs.backend = "shm";
    Cluster cluster(cs);
    cluster.start();
    Answers a(cluster);
    const json m = user("w300 w271");
    const json params = json::parse(R"({"type": "object", "properties": {"colour": {"type": "string",
        "enum": ["red", "blue"]}}, "required": ["colour"], "additionalProperties": false})");
    const json tools = {{{"type", "function"}, {"function", {{"name", "find"}, {"parameters", params}}}}};
    a.post("chat json_schema", "/v1/chat/completions",
           {{"messages", m},
            {"max_tokens", 60},
            {"response_format",
             {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", params}}}}}},
           "CreateChatCompletionResponse");
    const json forced = {{"messages", m},
                         {"max_tokens", 120},
                         {"tools", tools},
                         {"tool_choice", "required"},
                         {"logit_bias", bias}};
    a.post("chat tool call", "/v1/chat/completions", forced, "CreateChatCompletionResponse");
    json streamed = forced;
    streamed["stream"] = true;
    a.stream("chat tool call streamed", "/v1/chat/completions", streamed,
             "CreateChatCompletionStreamResponse");
    const json rforced = {{"input", "w300 w271"},
                          {"max_output_tokens", 120},
                          {"tools", {{{"type", "function"}, {"name", "find"}, {"parameters", params}}}},
                          {"tool_choice", "required"},
                          {"logit_bias", bias}};
    a.post("response function call", "/v1/responses", rforced, "Response");
    json rstreamed = rforced;
    rstreamed["stream"] = true;
    a.stream("response function call streamed", "/v1/responses", rstreamed, "");
    cases.insert(cases.end(), a.cases().begin(), a.cases().end());
    // The answers above really were calls (else the schema check proved less than it says).
    bool call = false;
    for (const auto& c : cases)
      call = call || c["instance"].dump().find("\"function_call\"") != std::string::npos;
    CHECK(call);
    cluster.wait_all_free();
  }
  fs::remove_all(dir);
  validate(cases);
}

}  // namespace openapi_e2e

TEST_CASE("OpenAPI: the answers of the OpenAI routes are what OpenAI's OpenAPI document describes") {
  openapi_e2e::check_answers();
}
