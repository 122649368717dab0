#include "epd/http/responses_request.hpp"

#include "wire_translation.hpp"

namespace epd::http::responses {
namespace {

using namespace openai::fields;
using wire::FieldOrigins;
using wire::ojson;

using wire::at_index;

// Writes the Responses body as a Chat Completions body.
class Translator {
 public:
  Translator(const json& doc, const ojson& ordered) : doc_(doc), ordered_(ordered) {}

  Failure run() {
    if (auto e = stateless()) return e;
    for (const char* key : {"reasoning", "prompt", "top_logprobs"})
      if (field(doc_, key)) return unsupported(key, in_quotes(key));
    if (const json* v = field(doc_, "include"); v && !(v->is_array() && v->empty()))
      return unsupported("include", "\"include\"");
    if (const json* v = field(doc_, "truncation"); v && *v != "disabled")
      return invalid("truncation", "\"truncation\" must be \"disabled\": epd never drops part of the input");
    if (const json* v = field(doc_, "model")) {
      if (!v->is_string()) return wrong_type("model", "a string", *v);
      chat_["model"] = *v;
    }
    if (auto e = instructions()) return e;
    if (auto e = input()) return e;
    if (auto e = tools()) return e;
    if (const json* v = field(doc_, "max_output_tokens")) {
      chat_["max_tokens"] = *v;
      origins_.add("max_tokens", "max_output_tokens");
    }
    if (auto e = text_format()) return e;
    // logit_bias: llama.cpp's sampling field, which llama-server takes on every route.
    for (const char* key :
         {"temperature", "top_p", "stream", "seed", "parallel_tool_calls", "tool_choice", "logit_bias"})
      if (field(doc_, key)) chat_[key] = ordered_[key];
    // A named function is {"type": "function", "name"} here, one level flatter than in a chat.
    if (const json* c = field(doc_, "tool_choice"); c && c->is_object() && c->contains("name")) {
      chat_["tool_choice"] = {{"type", (*c)["type"]}, {"function", {{"name", (*c)["name"]}}}};
      origins_.add("tool_choice.function.name", "tool_choice.name");
    }
    // As OpenAI's defaults: the Response repeats what the request left out.
    auto given = [&](const char* key, ojson otherwise) {
      return field(doc_, key) ? ordered_[key] : otherwise;
    };
    settings_["parallel_tool_calls"] = given("parallel_tool_calls", true);
    settings_["temperature"] = given("temperature", 0);
    settings_["tool_choice"] = given("tool_choice", "auto");
    settings_["top_p"] = given("top_p", 1);
    settings_["max_output_tokens"] = given("max_output_tokens", nullptr);
    return std::nullopt;
  }

  const ojson& chat() const { return chat_; }
  const FieldOrigins& origins() const { return origins_; }
  ojson settings() const { return settings_; }

 private:
  // Nothing is kept between requests: a request that relies on that is refused, never half-served.
  Failure stateless() {
    if (field(doc_, "previous_response_id"))
      return invalid("previous_response_id",
                     "\"previous_response_id\" is not supported: epd keeps no responses; send the whole "
                     "conversation in \"input\"");
    if (field(doc_, "conversation"))
      return invalid("conversation", "\"conversation\" is not supported: epd keeps no conversations");
    if (const json* v = field(doc_, "store"); v && *v != false)
      return invalid("store", "\"store\" must be false: epd keeps no responses");
    if (const json* v = field(doc_, "background"); v && *v != false)
      return invalid("background", "\"background\" must be false: epd answers while the client waits");
    return std::nullopt;
  }

  Failure instructions() {
    const json* v = nullptr;
    if (auto e = wire::string_field(doc_, "instructions", "", v)) return e;
    settings_["instructions"] = v ? ojson(*v) : ojson(nullptr);
    if (!v) return std::nullopt;
    chat_["messages"].push_back({{"role", "system"}, {"content", *v}});
    origins_.add("messages[0]", "instructions");
    return std::nullopt;
  }

  ojson& open(const std::string& role, const std::string& at) {
    const size_t k = chat_["messages"].size();
    chat_["messages"].push_back({{"role", role}});
    origins_.add(at_index("messages", k), at);
    return chat_["messages"].back();
  }

  std::string chat_at() const { return at_index("messages", chat_["messages"].size() - 1); }

  Failure input() {
    const json* v = field(doc_, "input");
    origins_.add("messages", "input");
    if (!v) return invalid("input", "\"input\" is required (a string or an array of items)");
    if (v->is_string()) {
      open("user", "input")["content"] = *v;
      return std::nullopt;
    }
    if (!v->is_array()) return wrong_type("input", "a string or an array of items", *v);
    if (v->empty()) return invalid("input", "\"input\" must not be empty");
    for (size_t i = 0; i < v->size(); ++i)
      if (auto e = item((*v)[i], at_index("input", i))) return e;
    return std::nullopt;
  }

  Failure item(const json& it, const std::string& at) {
    if (!it.is_object()) return wrong_type(at, "an input item", it);
    const json* type = nullptr;
    if (auto e = wire::string_field(it, "type", at, type)) return e;
    const std::string t = type ? type->get<std::string>() : "message";
    if (t == "message") return message(it, at);
    if (t == "function_call") return function_call(it, at);
    if (t == "function_call_output") return function_call_output(it, at);
    if (t == "reasoning") return std::nullopt;  // an earlier answer's thinking: templates leave it out
    return invalid(at + ".type", in_quotes(at + ".type") + " is " + clip(t) +
                                     "; epd takes message, function_call, function_call_output and reasoning "
                                     "items");
  }

  Failure message(const json& m, const std::string& at) {
    const json* role = nullptr;
    if (auto e = wire::string_field(m, "role", at, role, true)) return e;
    const std::string r = role->get<std::string>();
    if (r != "user" && r != "assistant" && r != "system" && r != "developer")
      return invalid(at + ".role", in_quotes(at + ".role") + " is " + clip(r) +
                                       "; it must be \"user\", \"assistant\", \"system\" or \"developer\"");
    const json* content = field(m, "content");
    if (!content) return invalid(at + ".content", in_quotes(at + ".content") + " is required");
    ojson& out = open(r, at);
    last_turn_takes_calls_ = r == "assistant";
    if (content->is_string()) {
      out["content"] = *content;
      return std::nullopt;
    }
    if (!content->is_array())
      return wrong_type(at + ".content", "a string or an array of content parts", *content);
    out["content"] = ojson::array();
    for (size_t j = 0; j < content->size(); ++j) {
      const json& p = (*content)[j];
      const std::string atj = at_index(at + ".content", j);
      if (!p.is_object()) return wrong_type(atj, "a content part", p);
      const json* type = nullptr;
      if (auto e = wire::string_field(p, "type", atj, type, true)) return e;
      const std::string t = type->get<std::string>();
      const std::string chat_part = at_index(chat_at() + ".content", out["content"].size());
      origins_.add(chat_part, atj);
      if (t == "input_text" || t == "output_text" || t == "refusal") {
        const json* text = nullptr;
        if (auto e = wire::string_field(p, t == "refusal" ? "refusal" : "text", atj, text, true)) return e;
        out["content"].push_back({{"type", "text"}, {"text", *text}});
      } else if (t == "input_image") {
        if (field(p, "file_id")) return unsupported(atj + ".file_id", "\"file_id\" (no files are kept)");
        const json* url = nullptr;
        if (auto e = wire::string_field(p, "image_url", atj, url, true)) return e;
        ojson image = {{"url", *url}};
        if (const json* d = field(p, "detail")) image["detail"] = *d;
        out["content"].push_back({{"type", "image_url"}, {"image_url", std::move(image)}});
        origins_.add(chat_part + ".image_url.url", atj + ".image_url");
        origins_.add(chat_part + ".image_url", atj);
      } else {
        return invalid(atj + ".type", in_quotes(atj + ".type") + " is " + clip(t) +
                                          "; epd takes input_text, input_image and output_text parts");
      }
    }
    return std::nullopt;
  }

  // Consecutive calls are one assistant turn (with the assistant message just before them, if any).
  Failure function_call(const json& c, const std::string& at) {
    const json *call_id = nullptr, *name = nullptr, *arguments = nullptr;
    if (auto e = wire::string_field(c, "call_id", at, call_id, true)) return e;
    if (auto e = wire::string_field(c, "name", at, name, true)) return e;
    if (auto e = wire::string_field(c, "arguments", at, arguments, true)) return e;
    ojson& messages = chat_["messages"];
    if (messages.empty() || messages.back()["role"] != "assistant" || !last_turn_takes_calls_)
      open("assistant", at);
    ojson& m = messages.back();
    if (!m.contains("tool_calls")) m["tool_calls"] = ojson::array();
    const std::string call_at = at_index(chat_at() + ".tool_calls", m["tool_calls"].size());
    origins_.add(call_at + ".function.name", at + ".name");
    origins_.add(call_at + ".function.arguments", at + ".arguments");
    origins_.add(call_at, at);
    m["tool_calls"].push_back(
        {{"id", *call_id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", *arguments}}}});
    last_turn_takes_calls_ = true;
    return std::nullopt;
  }

  Failure function_call_output(const json& c, const std::string& at) {
    const json *call_id = nullptr, *output = nullptr;
    if (auto e = wire::string_field(c, "call_id", at, call_id, true)) return e;
    if (auto e = wire::string_field(c, "output", at, output, true)) return e;
    ojson& m = open("tool", at);
    m["tool_call_id"] = *call_id;
    m["content"] = *output;
    last_turn_takes_calls_ = false;
    return std::nullopt;
  }

  // [{"type": "function", "name", "description", "parameters", "strict"}]; OpenAI's hosted tools (web
  // search, file search, computer use, ...) are not run here.
  Failure tools() {
    const json* v = field(doc_, "tools");
    settings_["tools"] = ojson::array();
    if (!v) return std::nullopt;
    if (!v->is_array()) return wrong_type("tools", "an array of tools", *v);
    const ojson& ordered = ordered_["tools"];
    chat_["tools"] = ojson::array();
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string at = at_index("tools", i);
      const json& t = (*v)[i];
      if (!t.is_object()) return wrong_type(at, "a tool object", t);
      const json* type = nullptr;
      if (auto e = wire::string_field(t, "type", at, type, true)) return e;
      if (*type != "function")
        return invalid(at + ".type",
                       in_quotes(at + ".type") + " is " + clip(type->get<std::string>()) +
                           "; epd runs no hosted tools, only \"function\" ones (the client runs "
                           "them)");
      ojson function;
      for (const char* key : {"name", "description", "parameters", "strict"})
        if (field(t, key)) function[key] = ordered[i][key];
      chat_["tools"].push_back({{"type", "function"}, {"function", std::move(function)}});
      // As a Response lists it: every field, null where the request had none.
      ojson listed = {{"type", "function"}};
      for (const char* key : {"name", "description", "parameters", "strict"})
        listed[key] = field(t, key) ? ordered[i][key] : ojson(nullptr);
      settings_["tools"].push_back(std::move(listed));
      origins_.add(at_index("tools", i) + ".function", at);
    }
    return std::nullopt;
  }

  // text.format: {"type": "text"} | {"type": "json_object"} | {"type": "json_schema", "name", "schema",
  // "strict", "description"} (Chat Completions' response_format, one level flatter).
  Failure text_format() {
    settings_["text"] = {{"format", {{"type", "text"}}}};
    const json* text = field(doc_, "text");
    if (!text) return std::nullopt;
    if (!text->is_object()) return wrong_type("text", "an object", *text);
    const json* format = field(*text, "format");
    if (!format) return std::nullopt;
    if (!format->is_object()) return wrong_type("text.format", "an object with a \"type\"", *format);
    settings_["text"]["format"] = ordered_["text"]["format"];
    const json* type = nullptr;
    if (auto e = wire::string_field(*format, "type", "text.format", type, true)) return e;
    origins_.add("response_format.json_schema", "text.format");
    origins_.add("response_format", "text.format");
    if (*type != "json_schema") {
      chat_["response_format"] = {{"type", *type}};
      return std::nullopt;
    }
    ojson schema;
    for (const char* key : {"name", "description", "schema", "strict"})
      if (field(*format, key)) schema[key] = ordered_["text"]["format"][key];
    chat_["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
    return std::nullopt;
  }

  const json& doc_;
  const ojson& ordered_;
  ojson chat_ = {{"messages", ojson::array()}};
  ojson settings_ = ojson::object();
  FieldOrigins origins_;
  bool last_turn_takes_calls_ = false;  // the last chat turn is an assistant's that calls may join
};

}  // namespace

std::variant<Parsed, HttpError> parse_request(std::string_view body, const openai::Limits& limits) {
  auto read = wire::read_body(body, limits);
  if (auto* e = std::get_if<HttpError>(&read)) return std::move(*e);
  const auto& [doc, ordered] = std::get<wire::Body>(read);
  Translator t(doc, ordered);
  if (auto e = t.run()) return std::move(*e);
  auto request = wire::parse_translated(t.chat(), t.origins(), limits);
  if (auto* e = std::get_if<HttpError>(&request)) return std::move(*e);
  return Parsed{std::move(std::get<openai::Request>(request)), t.settings()};
}

}  // namespace epd::http::responses
