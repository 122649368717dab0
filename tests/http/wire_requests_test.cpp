// Anthropic's Messages and OpenAI's Responses bodies as the neutral request, without a server: what each
// field becomes, and each refusal's status and the field it names in the client's own terms.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "epd/http/anthropic_request.hpp"
#include "epd/http/base64.hpp"
#include "epd/http/responses_request.hpp"

using namespace epd::http;
using nlohmann::json;

namespace {

openai::Limits limits() {
  openai::Limits l;
  l.max_image_bytes = 64;
  l.max_tokens_limit = 32;
  return l;
}

const std::string kPng("\x89PNG\r\n\x1a\nxx", 10);

std::string png_base64() {
  return base64_encode({reinterpret_cast<const uint8_t*>(kPng.data()), kPng.size()});
}

using ordered_json = nlohmann::ordered_json;

openai::Request anthropic_accepted(const ordered_json& body, bool count_tokens = false) {
  auto r = anthropic::parse_request(body.dump(), limits(), count_tokens);
  if (auto* e = std::get_if<HttpError>(&r)) FAIL("refused: " << e->message << " (param " << e->param << ")");
  return std::get<openai::Request>(r);
}

HttpError anthropic_refused(const json& body) {
  auto r = anthropic::parse_request(body.dump(), limits());
  if (!std::holds_alternative<HttpError>(r)) FAIL("accepted: " << body.dump());
  return std::get<HttpError>(r);
}

responses::Parsed responses_accepted(const json& body) {
  auto r = responses::parse_request(body.dump(), limits());
  if (auto* e = std::get_if<HttpError>(&r)) FAIL("refused: " << e->message << " (param " << e->param << ")");
  return std::get<responses::Parsed>(std::move(r));
}

HttpError responses_refused(const json& body) {
  auto r = responses::parse_request(body.dump(), limits());
  if (!std::holds_alternative<HttpError>(r)) FAIL("accepted: " << body.dump());
  return std::get<HttpError>(r);
}

json user(const std::string& text) {
  return json::array({{{"role", "user"}, {"content", text}}});
}

}  // namespace

TEST_CASE("Anthropic's blocks become the chat's turns, calls, tool results and images in order") {
  const ordered_json body = ordered_json::parse(R"({
    "max_tokens": 20, "top_k": 5, "temperature": 0.5, "stop_sequences": ["END"], "stream": true,
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
    "tools": [{"name": "find", "description": "Find.", "input_schema": {"type": "object", "required": ["z"],
               "properties": {"z": {"type": "integer"}, "a": {"type": "string"}}}}],
    "tool_choice": {"type": "tool", "name": "find", "disable_parallel_tool_use": true},
    "messages": [
      {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                   {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                "data": "PNG"}}]},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                        {"type": "text", "text": "Calling."},
                                        {"type": "tool_use", "id": "toolu_1", "name": "find", "input": {"z": 1}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                    "content": [{"type": "text", "text": "none"}]},
                                   {"type": "text", "text": "Again?"}]}]})");
  ordered_json with_image = body;
  with_image["messages"][0]["content"][1]["source"]["data"] = png_base64();
  const openai::Request r = anthropic_accepted(with_image);
  CHECK(r.endpoint == openai::Endpoint::chat);
  CHECK(r.max_tokens == 20);
  CHECK(r.stream);
  CHECK(r.sampling.top_k == 5);
  CHECK(r.stop == std::vector<std::string>{"END"});
  REQUIRE(r.messages.size() == 5);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[0].text == "Be brief.\nUse tools.");
  CHECK(r.messages[1].role == "user");
  CHECK(r.messages[1].media.size() == 1);
  CHECK(r.messages[2].role == "assistant");
  CHECK(r.messages[2].text == "Calling.");  // the earlier thinking is left out
  REQUIRE(r.messages[2].tool_calls.size() == 1);
  CHECK(r.messages[2].tool_calls[0].id == "toolu_1");
  CHECK(json::parse(r.messages[2].tool_calls[0].arguments) == json{{"z", 1}});
  CHECK(r.messages[3].role == "tool");
  CHECK(r.messages[3].tool_call_id == "toolu_1");
  CHECK(r.messages[3].text == "none");
  CHECK(r.messages[4].role == "user");
  CHECK(r.messages[4].text == "Again?");
  REQUIRE(r.tools.tools.size() == 1);
  CHECK(r.tools.choice == openai::Tools::Choice::named);
  CHECK(r.tools.named == "find");
  CHECK_FALSE(r.tools.parallel);
  // The schema keeps the client's key order (the prompt shows it as written).
  CHECK(r.tools.tools[0].parameters.find("\"required\"") <
        r.tools.tools[0].parameters.find("\"properties\""));
  CHECK(r.tools.tools[0].parameters.find("\"z\"") < r.tools.tools[0].parameters.find("\"a\""));

  SECTION("tool_choice any and none") {
    ordered_json b = with_image;
    b["tool_choice"] = {{"type", "any"}};
    CHECK(anthropic_accepted(b).tools.choice == openai::Tools::Choice::required);
    b["tool_choice"] = {{"type", "none"}};
    CHECK(anthropic_accepted(b).tools.choice == openai::Tools::Choice::none);
  }
  SECTION("count_tokens takes the body without max_tokens") {
    ordered_json b = with_image;
    b.erase("max_tokens");
    CHECK(anthropic_accepted(b, true).messages.size() == 5);
    CHECK(anthropic_refused(json::parse(b.dump())).param == "max_tokens");
  }
}

TEST_CASE("Anthropic bodies epd cannot serve are a 400 naming the client's field") {
  struct Case {
    const char* name;
    json body;
    std::string param;
    std::string says;
  };
  const json img_url = {{"type", "image"}, {"source", {{"type", "url"}, {"url", "http://x"}}}};
  const json bad_png = {{"type", "image"},
                        {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "AAAA"}}}};
  const std::vector<Case> cases = {
      {"no max_tokens", {{"messages", user("hi")}}, "max_tokens", "is required"},
      {"max_tokens over the limit", {{"max_tokens", 99}, {"messages", user("hi")}}, "max_tokens", "1..32"},
      {"thinking",
       {{"max_tokens", 8}, {"messages", user("hi")}, {"thinking", {{"type", "enabled"}}}},
       "thinking",
       "not supported"},
      {"a system turn in messages",
       {{"max_tokens", 8}, {"messages", {{{"role", "system"}, {"content", "x"}}}}},
       "messages[0].role",
       "\"user\" or \"assistant\""},
      {"a URL image",
       {{"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", {img_url}}}}}},
       "messages[0].content[0].source.type",
       "fetches no URL"},
      {"an image that is not one",
       {{"max_tokens", 8},
        {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, bad_png}}}}}},
       "messages[0].content[1].source",
       "messages[0].content[1].source"},
      {"tool_use from the user",
       {{"max_tokens", 8},
        {"messages",
         {{{"role", "user"},
           {"content", {{{"type", "tool_use"}, {"id", "t"}, {"name", "f"}, {"input", json::object()}}}}}}}},
       "messages[0].content[0].type",
       "only assistant messages"},
      {"tool_use input that is not an object",
       {{"max_tokens", 8},
        {"messages",
         {{{"role", "user"}, {"content", "a"}},
          {{"role", "assistant"},
           {"content", {{{"type", "tool_use"}, {"id", "t"}, {"name", "f"}, {"input", 3}}}}}}}},
       "messages[1].content[0].input",
       "must be an object"},
      {"a bad tool name in a past call",
       {{"max_tokens", 8},
        {"messages",
         {{{"role", "user"}, {"content", "a"}},
          {{"role", "assistant"},
           {"content", {{{"type", "tool_use"}, {"id", "t"}, {"name", "a b"}, {"input", json::object()}}}}}}}},
       "messages[1].content[0].name",
       "1 to 64"},
      {"an unknown block",
       {{"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", {{{"type", "document"}}}}}}}},
       "messages[0].content[0].type",
       "\"document\""},
      {"five stop sequences",
       {{"max_tokens", 8}, {"messages", user("hi")}, {"stop_sequences", {"a", "b", "c", "d", "e"}}},
       "stop_sequences",
       "\"stop_sequences\" holds 5"},
      {"a temperature of 3",
       {{"max_tokens", 8}, {"messages", user("hi")}, {"temperature", 3}},
       "temperature",
       "[0, 2]"},
      {"a tool without input_schema",
       {{"max_tokens", 8}, {"messages", user("hi")}, {"tools", {{{"name", "f"}}}}},
       "tools[0].input_schema",
       "is required"},
      {"a server tool",
       {{"max_tokens", 8},
        {"messages", user("hi")},
        {"tools", {{{"type", "bash_20250124"}, {"name", "bash"}}}}},
       "tools[0].type",
       "no server tools"},
      {"an unknown tool_choice",
       {{"max_tokens", 8}, {"messages", user("hi")}, {"tool_choice", {{"type", "bogus"}}}},
       "tool_choice.type",
       "\"bogus\""},
      {"a marker in the text",
       {{"max_tokens", 8}, {"system", "s"}, {"messages", user("a <__media__> b")}},
       "messages[0].content",
       "<__media__>"},
      {"messages not an array", {{"max_tokens", 8}, {"messages", "hi"}}, "messages", "must be an array"},
      {"text over the limit",
       {{"max_tokens", 8}, {"messages", user(std::string(70 * 1024, 'a'))}},
       "messages",
       "exceeds the limit of 65536 bytes"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const HttpError e = anthropic_refused(c.body);
    CHECK(e.status == (c.says.starts_with("exceeds") ? 413 : 400));
    CHECK(e.param == c.param);
    CHECK_THAT(e.message, Catch::Contains(c.says));
  }
}

TEST_CASE("Responses items become the chat's turns and the Response repeats the request's settings") {
  json body = json::parse(R"({
    "instructions": "Be brief.", "max_output_tokens": 12, "temperature": 0.5, "stream": true,
    "tools": [{"type": "function", "name": "find", "parameters": {"type": "object", "required": ["z"],
               "properties": {"z": {"type": "integer"}}}, "strict": true}],
    "tool_choice": {"type": "function", "name": "find"}, "parallel_tool_calls": false,
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Look:"},
                                   {"type": "input_image", "image_url": "PNG", "detail": "auto"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Calling."}]},
      {"type": "function_call", "call_id": "c1", "name": "find", "arguments": "{\"z\": 1}"},
      {"type": "function_call", "call_id": "c2", "name": "find", "arguments": "{\"z\": 2}"},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "function_call_output", "call_id": "c1", "output": "none"},
      {"type": "function_call_output", "call_id": "c2", "output": "two"},
      {"role": "developer", "content": "Answer now."}]})");
  body["input"][0]["content"][1]["image_url"] = "data:image/png;base64," + png_base64();
  const responses::Parsed p = responses_accepted(body);
  const openai::Request& r = p.request;
  CHECK(r.max_tokens == 12);
  CHECK(r.stream);
  REQUIRE(r.messages.size() == 6);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[1].media.size() == 1);
  CHECK(r.messages[2].role == "assistant");
  CHECK(r.messages[2].text == "Calling.");
  REQUIRE(r.messages[2].tool_calls.size() == 2);  // the message and the calls after it are one turn
  CHECK(r.messages[2].tool_calls[1].id == "c2");
  CHECK(r.messages[3].tool_call_id == "c1");
  CHECK(r.messages[4].text == "two");
  CHECK(r.messages[5].role == "developer");
  CHECK(r.tools.choice == openai::Tools::Choice::named);
  CHECK_FALSE(r.tools.parallel);
  CHECK(p.settings["instructions"] == "Be brief.");
  CHECK(p.settings["max_output_tokens"] == 12);
  CHECK(p.settings["tool_choice"] == json{{"type", "function"}, {"name", "find"}});
  CHECK(p.settings["tools"][0]["strict"] == true);

  SECTION("text.format json_schema is the chat's response_format") {
    const responses::Parsed q = responses_accepted(json::parse(R"({"input": "hi", "text": {"format":
        {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": true}}})"));
    CHECK(q.request.constraint.kind == openai::Constraint::Kind::json_schema);
    CHECK(json::parse(q.request.constraint.text) == json{{"type", "object"}});
    CHECK(q.settings["text"]["format"]["name"] == "out");
  }

  SECTION("a string input is one user turn, and the defaults are repeated") {
    const responses::Parsed q = responses_accepted({{"input", "hi"}});
    REQUIRE(q.request.messages.size() == 1);
    CHECK(q.request.messages[0].role == "user");
    CHECK(q.settings["instructions"].is_null());
    CHECK(q.settings["tool_choice"] == "auto");
    CHECK(q.settings["parallel_tool_calls"] == true);
    CHECK(q.settings["text"]["format"]["type"] == "text");
    CHECK(q.settings["max_output_tokens"].is_null());
  }
}

TEST_CASE("Responses bodies epd cannot serve are a 400 naming the client's field") {
  struct Case {
    const char* name;
    json body;
    std::string param;
    std::string says;
  };
  const json image_part = {{"type", "input_image"}, {"image_url", "data:image/png;base64,AAAA"}};
  const std::vector<Case> cases = {
      {"previous_response_id",
       {{"input", "hi"}, {"previous_response_id", "r"}},
       "previous_response_id",
       "keeps no responses"},
      {"store", {{"input", "hi"}, {"store", true}}, "store", "must be false"},
      {"background", {{"input", "hi"}, {"background", true}}, "background", "must be false"},
      {"conversation", {{"input", "hi"}, {"conversation", "c"}}, "conversation", "keeps no conversations"},
      {"include",
       {{"input", "hi"}, {"include", {"reasoning.encrypted_content"}}},
       "include",
       "not supported"},
      {"truncation auto", {{"input", "hi"}, {"truncation", "auto"}}, "truncation", "\"disabled\""},
      {"reasoning", {{"input", "hi"}, {"reasoning", {{"effort", "low"}}}}, "reasoning", "not supported"},
      {"top_logprobs", {{"input", "hi"}, {"top_logprobs", 2}}, "top_logprobs", "not supported"},
      {"no input", json::object(), "input", "is required"},
      {"input of the wrong type", {{"input", 7}}, "input", "a string or an array"},
      {"empty input", {{"input", json::array()}}, "input", "must not be empty"},
      {"an unknown item",
       {{"input", {{{"type", "item_reference"}, {"id", "x"}}}}},
       "input[0].type",
       "\"item_reference\""},
      {"a tool role", {{"input", {{{"role", "tool"}, {"content", "x"}}}}}, "input[0].role", "\"tool\""},
      {"a file image",
       {{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"file_id", "f"}}}}}}}},
       "input[0].content[0].file_id",
       "no files are kept"},
      {"an image that is not one",
       {{"instructions", "s"}, {"input", {{{"role", "user"}, {"content", {image_part}}}}}},
       "input[0].content[0].image_url",
       "input[0].content[0].image_url"},
      {"an unknown part",
       {{"input", {{{"role", "user"}, {"content", {{{"type", "input_file"}}}}}}}},
       "input[0].content[0].type",
       "\"input_file\""},
      {"a call without arguments",
       {{"input", {{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}}}}},
       "input[0].arguments",
       "is required"},
      {"a call whose arguments are not an object",
       {{"input",
         {{{"role", "user"}, {"content", "a"}},
          {{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "[1]"}}}}},
       "input[1].arguments",
       "a JSON object's text"},
      {"a hosted tool",
       {{"input", "hi"}, {"tools", {{{"type", "web_search"}}}}},
       "tools[0].type",
       "no hosted tools"},
      {"max_output_tokens 0",
       {{"input", "hi"}, {"max_output_tokens", 0}},
       "max_output_tokens",
       "\"max_output_tokens\" is 0"},
      {"an unknown text format",
       {{"input", "hi"}, {"text", {{"format", {{"type", "yaml"}}}}}},
       "text.format.type",
       "yaml"},
      {"a json_schema without a schema",
       {{"input", "hi"}, {"text", {{"format", {{"type", "json_schema"}, {"name", "x"}}}}}},
       "text.format.schema",
       "text.format.schema"},
      {"a marker in the text",
       {{"instructions", "s"}, {"input", {{{"role", "user"}, {"content", "a <__media__>"}}}}},
       "input[0].content",
       "<__media__>"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const HttpError e = responses_refused(c.body);
    CHECK(e.status == 400);
    CHECK(e.param == c.param);
    CHECK_THAT(e.message, Catch::Contains(c.says));
  }
}
