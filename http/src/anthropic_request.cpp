#include "epd/http/anthropic_request.hpp"

#include "wire_translation.hpp"

namespace epd::http::anthropic {
namespace {

using namespace openai::fields;
using wire::FieldOrigins;
using wire::ojson;

using wire::at_index;

// Writes the Messages body as a Chat Completions body.
class Translator {
 public:
  Translator(const json& doc, const ojson& ordered, bool count_tokens)
      : doc_(doc), ordered_(ordered), count_tokens_(count_tokens) {}

  Failure run() {
    for (const char* key : {"thinking", "container", "mcp_servers"})
      if (field(doc_, key)) return unsupported(key, in_quotes(key));
    if (const json* v = field(doc_, "model")) {
      if (!v->is_string()) return wrong_type("model", "a string", *v);
      chat_["model"] = *v;
    }
    if (auto e = max_tokens()) return e;
    if (auto e = system()) return e;
    if (auto e = messages()) return e;
    if (auto e = tools()) return e;
    if (auto e = tool_choice()) return e;
    if (const json* v = field(doc_, "stop_sequences")) {
      chat_["stop"] = *v;
      origins_.add("stop", "stop_sequences");
    }
    // logit_bias: llama.cpp's sampling field, which llama-server takes on every route.
    for (const char* key : {"temperature", "top_p", "top_k", "stream", "logit_bias"})
      if (const json* v = field(doc_, key)) chat_[key] = *v;
    return std::nullopt;
  }

  const ojson& chat() const { return chat_; }
  const FieldOrigins& origins() const { return origins_; }

 private:
  Failure max_tokens() {
    const json* v = field(doc_, "max_tokens");
    if (count_tokens_) return std::nullopt;  // nothing is generated
    if (!v) return invalid("max_tokens", "\"max_tokens\" is required");
    chat_["max_tokens"] = *v;
    return std::nullopt;
  }

  // A string or text blocks, joined with "\n".
  Failure system() {
    const json* v = field(doc_, "system");
    if (!v) return std::nullopt;
    std::string text;
    if (auto e = text_of(*v, "system", text)) return e;
    chat_["messages"].push_back({{"role", "system"}, {"content", text}});
    origins_.add("messages[0]", "system");
    return std::nullopt;
  }

  Failure text_of(const json& v, const std::string& at, std::string& out) {
    if (v.is_string()) {
      out = v.get<std::string>();
      return std::nullopt;
    }
    if (!v.is_array()) return wrong_type(at, "a string or an array of text blocks", v);
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string ati = at_index(at, i);
      if (!v[i].is_object()) return wrong_type(ati, "a text block", v[i]);
      const json* type = nullptr;
      if (auto e = wire::string_field(v[i], "type", ati, type, true)) return e;
      if (*type != "text")
        return invalid(ati + ".type", in_quotes(ati + ".type") + " is " + clip(type->get<std::string>()) +
                                          "; only \"text\" blocks are taken here");
      const json* text = nullptr;
      if (auto e = wire::string_field(v[i], "text", ati, text, true)) return e;
      if (i > 0) out += '\n';
      out += text->get<std::string>();
    }
    return std::nullopt;
  }

  Failure messages() {
    const json* v = field(doc_, "messages");
    if (!v) return invalid("messages", "\"messages\" is required (an array of messages)");
    if (!v->is_array()) return wrong_type("messages", "an array of messages", *v);
    if (v->empty()) return invalid("messages", "\"messages\" must not be empty");
    for (size_t i = 0; i < v->size(); ++i)
      if (auto e = message((*v)[i], at_index("messages", i))) return e;
    return std::nullopt;
  }

  // Appends a chat message made from (part of) the client's message at `at`.
  ojson& open(const std::string& role, const std::string& at) {
    const size_t k = chat_["messages"].size();
    chat_["messages"].push_back({{"role", role}, {"content", ojson::array()}});
    origins_.add(at_index("messages", k), at);
    return chat_["messages"].back();
  }

  Failure message(const json& m, const std::string& at) {
    if (!m.is_object()) return wrong_type(at, "an object with \"role\" and \"content\"", m);
    const json* role = nullptr;
    if (auto e = wire::string_field(m, "role", at, role, true)) return e;
    if (*role != "user" && *role != "assistant")
      return invalid(at + ".role", in_quotes(at + ".role") + " is " + clip(role->get<std::string>()) +
                                       "; it must be \"user\" or \"assistant\" (the system text goes in "
                                       "\"system\")");
    const json* content = field(m, "content");
    if (!content) return invalid(at + ".content", in_quotes(at + ".content") + " is required");
    const std::string r = role->get<std::string>();
    if (content->is_string()) {
      open(r, at)["content"] = *content;
      return std::nullopt;
    }
    if (!content->is_array()) return wrong_type(at + ".content", "a string or an array of blocks", *content);
    ojson* current = nullptr;  // the chat message text and image blocks go to
    for (size_t j = 0; j < content->size(); ++j) {
      const json& b = (*content)[j];
      const std::string atj = at_index(at + ".content", j);
      if (!b.is_object()) return wrong_type(atj, "a content block", b);
      const json* type = nullptr;
      if (auto e = wire::string_field(b, "type", atj, type, true)) return e;
      const std::string t = type->get<std::string>();
      if (t == "tool_result") {
        if (r != "user") return invalid(atj + ".type", "only user messages carry tool_result blocks");
        if (auto e = tool_result(b, atj)) return e;
        current = nullptr;
        continue;
      }
      if (t == "thinking" || t == "redacted_thinking") {
        // An earlier answer's thinking: templates leave it out of the prompt, as Anthropic does.
        if (r != "assistant") return invalid(atj + ".type", "only assistant messages carry thinking blocks");
        continue;
      }
      if (!current) current = &open(r, at);
      if (t == "tool_use") {
        if (r != "assistant") return invalid(atj + ".type", "only assistant messages carry tool_use blocks");
        if (auto e = tool_use(b, atj, *current)) return e;
        continue;
      }
      ojson& parts = (*current)["content"];
      origins_.add(at_index(at_index("messages", chat_["messages"].size() - 1) + ".content", parts.size()),
                   atj);
      if (t == "text") {
        const json* text = nullptr;
        if (auto e = wire::string_field(b, "text", atj, text, true)) return e;
        parts.push_back({{"type", "text"}, {"text", *text}});
      } else if (t == "image") {
        if (r != "user") return invalid(atj + ".type", "images are only allowed in user messages");
        if (auto e = image(b, atj, parts)) return e;
      } else {
        return invalid(atj + ".type",
                       in_quotes(atj + ".type") + " is " + clip(t) +
                           "; epd takes text, image, tool_use, tool_result and thinking blocks");
      }
    }
    return std::nullopt;
  }

  // {"type": "image", "source": {"type": "base64", "media_type", "data"}}: a data: URI for the chat parser.
  Failure image(const json& b, const std::string& at, ojson& parts) {
    const json* source = field(b, "source");
    if (!source || !source->is_object())
      return invalid(at + ".source", in_quotes(at + ".source") + " must be an object");
    const json* type = nullptr;
    if (auto e = wire::string_field(*source, "type", at + ".source", type, true)) return e;
    if (*type != "base64")
      return invalid(at + ".source.type", in_quotes(at + ".source.type") + " is " +
                                              clip(type->get<std::string>()) +
                                              "; epd takes images as \"base64\" data (it fetches no URL)");
    const json *media = nullptr, *data = nullptr;
    if (auto e = wire::string_field(*source, "media_type", at + ".source", media, true)) return e;
    if (auto e = wire::string_field(*source, "data", at + ".source", data, true)) return e;
    parts.push_back(
        {{"type", "image_url"},
         {"image_url",
          {{"url", "data:" + media->get<std::string>() + ";base64," + data->get<std::string>()}}}});
    const std::string chat_at =
        at_index(at_index("messages", chat_["messages"].size() - 1) + ".content", parts.size() - 1);
    origins_.add(chat_at + ".image_url.url", at + ".source");
    return std::nullopt;
  }

  // {"type": "tool_use", "id", "name", "input": {...}}: a call of the assistant's turn.
  Failure tool_use(const json& b, const std::string& at, ojson& message) {
    const json *id = nullptr, *name = nullptr;
    if (auto e = wire::string_field(b, "id", at, id, true)) return e;
    if (auto e = wire::string_field(b, "name", at, name, true)) return e;
    const json* input = field(b, "input");
    if (!input || !input->is_object())
      return invalid(at + ".input", in_quotes(at + ".input") + " must be an object");
    if (!message.contains("tool_calls")) message["tool_calls"] = ojson::array();
    const std::string chat_at = at_index(at_index("messages", chat_["messages"].size() - 1) + ".tool_calls",
                                         message["tool_calls"].size());
    origins_.add(chat_at + ".function.name", at + ".name");
    origins_.add(chat_at + ".function.arguments", at + ".input");
    origins_.add(chat_at, at);
    message["tool_calls"].push_back(
        {{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", input->dump()}}}});
    return std::nullopt;
  }

  // {"type": "tool_result", "tool_use_id", "content": a string or text blocks}: a tool message.
  Failure tool_result(const json& b, const std::string& at) {
    const json* id = nullptr;
    if (auto e = wire::string_field(b, "tool_use_id", at, id, true)) return e;
    std::string text;
    if (const json* content = field(b, "content"))
      if (auto e = text_of(*content, at + ".content", text)) return e;
    if (const json* is_error = field(b, "is_error"); is_error && !is_error->is_boolean())
      return wrong_type(at + ".is_error", "a boolean", *is_error);
    ojson& m = open("tool", at);
    m["tool_call_id"] = *id;
    m["content"] = text;
    return std::nullopt;
  }

  // [{"name", "description", "input_schema"}]; Anthropic's server tools (web search, code execution, ...)
  // are not run here.
  Failure tools() {
    const json* v = field(doc_, "tools");
    if (!v) return std::nullopt;
    if (!v->is_array()) return wrong_type("tools", "an array of tools", *v);
    const ojson& ordered = ordered_["tools"];
    chat_["tools"] = ojson::array();
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string at = at_index("tools", i);
      const json& t = (*v)[i];
      if (!t.is_object()) return wrong_type(at, "a tool object", t);
      if (const json* type = field(t, "type"); type && *type != "custom")
        return invalid(at + ".type", in_quotes(at + ".type") + " is " + clip(type->dump()) +
                                         "; epd runs no server tools, only \"custom\" ones (the client runs "
                                         "them)");
      const json* name = nullptr;
      if (auto e = wire::string_field(t, "name", at, name, true)) return e;
      const json* schema = field(t, "input_schema");
      if (!schema) return invalid(at + ".input_schema", in_quotes(at + ".input_schema") + " is required");
      ojson function = {{"name", *name}};
      if (const json* d = field(t, "description")) function["description"] = *d;
      function["parameters"] = ordered[i]["input_schema"];
      chat_["tools"].push_back({{"type", "function"}, {"function", std::move(function)}});
      origins_.add(at_index("tools", i) + ".function.parameters", at + ".input_schema");
      origins_.add(at_index("tools", i) + ".function", at);
    }
    return std::nullopt;
  }

  // {"type": "auto" | "any" | "tool" | "none", "name", "disable_parallel_tool_use"}.
  Failure tool_choice() {
    const json* v = field(doc_, "tool_choice");
    if (!v) return std::nullopt;
    if (!v->is_object()) return wrong_type("tool_choice", "an object with a \"type\"", *v);
    const json* type = nullptr;
    if (auto e = wire::string_field(*v, "type", "tool_choice", type, true)) return e;
    origins_.add("tool_choice", "tool_choice");
    if (*type == "auto") {
      chat_["tool_choice"] = "auto";
    } else if (*type == "any") {
      chat_["tool_choice"] = "required";
    } else if (*type == "none") {
      chat_["tool_choice"] = "none";
    } else if (*type == "tool") {
      const json* name = nullptr;
      if (auto e = wire::string_field(*v, "name", "tool_choice", name, true)) return e;
      chat_["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
    } else {
      return invalid("tool_choice.type", "\"tool_choice.type\" is " + clip(type->get<std::string>()) +
                                             "; it must be \"auto\", \"any\", \"tool\" or \"none\"");
    }
    if (const json* d = field(*v, "disable_parallel_tool_use")) {
      if (!d->is_boolean()) return wrong_type("tool_choice.disable_parallel_tool_use", "a boolean", *d);
      chat_["parallel_tool_calls"] = !d->get<bool>();
    }
    return std::nullopt;
  }

  const json& doc_;
  const ojson& ordered_;
  const bool count_tokens_;
  ojson chat_ = {{"messages", ojson::array()}};
  FieldOrigins origins_;
};

}  // namespace

std::variant<openai::Request, HttpError> parse_request(std::string_view body, const openai::Limits& limits,
                                                       bool count_tokens) {
  auto read = wire::read_body(body, limits);
  if (auto* e = std::get_if<HttpError>(&read)) return std::move(*e);
  const auto& [doc, ordered] = std::get<wire::Body>(read);
  Translator t(doc, ordered, count_tokens);
  if (auto e = t.run()) return std::move(*e);
  return wire::parse_translated(t.chat(), t.origins(), limits);
}

}  // namespace epd::http::anthropic
