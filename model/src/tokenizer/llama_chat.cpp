// llama.cpp's chat layer behind llama_chat.hpp. The prompt is common_chat_templates_apply's, exactly what
// llama-server sends to its tokenizer; the input marks come from a second rendering of the same template with
// the same inputs through the Jinja engine directly (llama.cpp flattens its own result to one string), used
// only when it gives the same text.
#include "llama_chat.hpp"

#include <chrono>
#include <ctime>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "chat.h"
#include "jinja/runtime.h"
#include "jinja/value.h"

namespace epd::model::llama_chat {
namespace {

using json = common_json;

// chat.cpp's format_time, for the date llama.cpp puts in every template's context.
std::string format_time(std::chrono::system_clock::time_point now, const char* format) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm local{};
  localtime_r(&t, &local);
  std::ostringstream ss;
  ss << std::put_time(&local, format);
  return ss.str();
}

common_chat_msg to_common(const Message& m) {
  common_chat_msg out;
  out.role = m.role;
  out.content = m.content;
  out.reasoning_content = m.reasoning_content;
  out.tool_call_id = m.tool_call_id;
  for (const Call& c : m.calls) out.tool_calls.push_back({c.name, c.arguments, c.id});
  return out;
}

class LlamaParser final : public Parser {
 public:
  explicit LlamaParser(const common_chat_params& p) : params_(p) {
    params_.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;  // llama-server's default
    if (!p.parser.empty()) params_.parser.load(p.parser);
  }
  std::string format_name() const override { return common_chat_format_name(params_.format); }
  std::optional<Answer> parse(const std::string& text, bool partial, std::string* error) const override {
    try {
      common_chat_msg msg = common_chat_parse(text, partial, params_);
      Answer a{msg.content, msg.reasoning_content, {}};
      for (const auto& c : msg.tool_calls) a.calls.push_back({c.id, c.name, c.arguments});
      return a;
    } catch (const std::exception& e) {
      if (error) *error = e.what();
      return std::nullopt;
    }
  }

 private:
  common_chat_parser_params params_;
};

class LlamaTemplates final : public Templates {
 public:
  LlamaTemplates(const std::string& source, const std::string& bos, const std::string& eos)
      // "chatml" is llama.cpp's name for its ChatML default (an empty override would ask the model)
      : tmpls_(common_chat_templates_init(nullptr, source.empty() ? "chatml" : source, bos, eos)),
        tmpl_(common_chat_templates_source(tmpls_.get()), bos, eos) {}

  Rendered apply(const std::vector<Message>& messages, const std::vector<std::string>& tools,
                 ToolChoice choice, bool parallel_tool_calls, bool enable_thinking) const override {
    try {
      return apply_or_throw(messages, tools, choice, parallel_tool_calls, enable_thinking);
    } catch (const std::exception& e) {
      throw std::runtime_error(e.what());  // a standard type across the library's hidden symbols
    }
  }

  bool supports(const std::string& capability) const override {
    auto caps = common_chat_templates_get_caps(tmpls_.get());
    auto it = caps.find(capability);
    return it != caps.end() && it->second;
  }

 private:
  Rendered apply_or_throw(const std::vector<Message>& messages, const std::vector<std::string>& tools,
                          ToolChoice choice, bool parallel_tool_calls, bool enable_thinking) const {
    common_chat_templates_inputs in;
    for (const Message& m : messages) in.messages.push_back(to_common(m));
    json tools_json = json::array();
    for (const std::string& t : tools) tools_json.push_back(json::parse(t));
    in.tools = common_chat_tools_parse_oaicompat(tools_json);
    in.add_generation_prompt = true;
    in.use_jinja = true;
    in.tool_choice =
        choice == ToolChoice::required ? COMMON_CHAT_TOOL_CHOICE_REQUIRED : COMMON_CHAT_TOOL_CHOICE_AUTO;
    in.parallel_tool_calls = parallel_tool_calls;
    in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;  // llama-server's default
    in.enable_thinking = enable_thinking;
    const auto now = std::chrono::system_clock::now();
    in.now = now;
    common_chat_params p = common_chat_templates_apply(tmpls_.get(), in);
    Rendered out;
    out.prompt = p.prompt;
    out.parser = std::make_shared<LlamaParser>(p);
    out.additional_stops = p.additional_stops;
    out.supports_thinking = p.supports_thinking;
    out.grammar = p.grammar;
    out.grammar_lazy = p.grammar_lazy;
    for (const common_grammar_trigger& t : p.grammar_triggers) {
      Trigger::Kind kind = Trigger::Kind::word;
      if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN) kind = Trigger::Kind::pattern;
      if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL) kind = Trigger::Kind::pattern_full;
      if (t.type == COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN)
        throw std::runtime_error("the chat layer reported a token trigger without a vocabulary");
      out.triggers.push_back({kind, t.value});
    }
    out.preserved_tokens = p.preserved_tokens;
    out.generation_prompt = p.generation_prompt;
    out.parts = marked(in, now);
    std::string joined;
    for (const Part& part : out.parts) joined += part.text;
    if (joined != out.prompt) out.parts.clear();
    return out;
  }

  // The rendering of llama.cpp's generic path (common_chat_templates_apply_jinja, then
  // common_chat_template_direct_apply) with the engine's input marks kept.
  std::vector<Part> marked(const common_chat_templates_inputs& in,
                           std::chrono::system_clock::time_point now) const {
    const jinja::caps& caps = tmpl_.original_caps();
    json messages = json::array();
    for (const common_chat_msg& m : in.messages) {
      json j = m.to_json_oaicompat(false);
      if (!caps.supports_string_content && caps.supports_typed_content && j.contains("content") &&
          j.at("content").is_string()) {
        json part = json::object();
        part["type"] = "text";
        part["text"] = j.at("content").get<std::string>();
        json arr = json::array();
        arr.push_back(part);
        j["content"] = arr;
      }
      if (caps.supports_object_arguments && j.contains("tool_calls")) {
        for (size_t i = 0; i < j["tool_calls"].size(); ++i) {
          json& args = j["tool_calls"][i]["function"]["arguments"];
          if (args.is_string()) args = json::parse(args.get<std::string>());
        }
      }
      messages.push_back(j);
    }
    if (!caps.supports_system_role && messages.size() > 0 &&
        messages[size_t(0)].at("role").get<std::string>() == "system") {
      if (messages.size() > 1) {
        messages[size_t(1)]["content"] = messages[size_t(0)].at("content").get<std::string>() + "\n" +
                                         messages[size_t(1)].at("content").get<std::string>();
      }
      messages.erase(size_t(0));
    }
    // The request's strings are marked; the template's own variables (BOS/EOS spellings, flags, dates) are
    // not.
    json request = json::object();
    request["messages"] = messages;
    if (!in.tools.empty()) request["tools"] = common_chat_tools_to_json_oaicompat(in.tools);
    json inp = json::object();
    inp["bos_token"] = tmpl_.bos_token();
    inp["eos_token"] = tmpl_.eos_token();
    inp["enable_thinking"] = in.enable_thinking;
    inp["datetime"] = format_time(now, "%b %d %Y");
    inp["date_string"] = format_time(now, "%d %b %Y");
    inp["add_generation_prompt"] = true;
    jinja::context ctx(tmpl_.source());
    jinja::global_from_json(ctx, request, /*mark_input=*/true);
    jinja::global_from_json(ctx, inp, /*mark_input=*/false);
    jinja::runtime runtime(ctx);
    const jinja::value results = runtime.execute(tmpl_.prog);
    auto gathered = jinja::runtime::gather_string_parts(results);
    std::vector<Part> out;
    for (const jinja::string_part& sp : gathered->as_string().parts) {
      if (sp.val.empty()) continue;
      if (!out.empty() && out.back().input == sp.is_input)
        out.back().text += sp.val;
      else
        out.push_back({sp.val, sp.is_input});
    }
    return out;
  }

  common_chat_templates_ptr tmpls_;
  common_chat_template tmpl_;
};

}  // namespace

std::unique_ptr<Templates> make_templates(const std::string& source, const std::string& bos,
                                          const std::string& eos) {
  try {
    return std::make_unique<LlamaTemplates>(source, bos, eos);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("the chat template does not parse: ") + e.what());
  }
}

}  // namespace epd::model::llama_chat
