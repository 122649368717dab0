#include "epd/http/openai_request.hpp"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "constraint_fields.hpp"
#include "json_body.hpp"
#include "llama_server_fields.hpp"
#include "openai_fields.hpp"
#include "openai_messages.hpp"
#include "sampling_fields.hpp"
#include "tool_fields.hpp"

namespace epd::http::openai {
namespace {

using namespace fields;

constexpr size_t kMaxStops = 4;                 // OpenAI's limit
constexpr uint32_t kMaxCompletionLogprobs = 5;  // OpenAI's limit of the completions route's "logprobs"

class Parser {
 public:
  Parser(Endpoint endpoint, const json& doc, std::string_view body, const Limits& limits, Request& out)
      : endpoint_(endpoint), doc_(doc), body_(body), limits_(limits), out_(out) {}

  Failure model() {
    const json* v = field(doc_, "model");
    if (!v) return {};
    if (!v->is_string()) return wrong_type("model", "a string", *v);
    out_.model = v->get<std::string>();
    return {};
  }

  Failure prompt() {
    const json* v = field(doc_, "prompt");
    if (!v) return invalid("prompt", "\"prompt\" is required (a string)");
    const json* text = v;
    std::string param = "prompt";
    if (v->is_array()) {
      if (v->empty()) return invalid(param, "\"prompt\" is an empty array; send the prompt as a string");
      const json& first = v->front();
      if (first.is_number_integer() || first.is_array()) {
        return invalid(param, "\"prompt\" as token ids is not supported by epd; send the prompt as text");
      }
      if (v->size() > 1) {
        return invalid(param, "\"prompt\" holds " + std::to_string(v->size()) +
                                  " prompts; epd takes one prompt per request: send one request per prompt");
      }
      text = &first;
      param = "prompt[0]";
    }
    if (!text->is_string()) return wrong_type(param, "a string", *text);
    const auto& s = text->get_ref<const std::string&>();
    if (s.empty()) return invalid(param, in_quotes(param) + " must not be empty");
    if (s.size() > limits_.max_prompt_bytes) {
      return oversized(param, in_quotes(param) + " is " + std::to_string(s.size()) + " bytes; the limit is " +
                                  std::to_string(limits_.max_prompt_bytes) + " bytes");
    }
    out_.prompt = s;
    return {};
  }

  Failure messages() { return parse_messages(doc_, limits_, out_.messages); }

  Failure max_tokens() {
    const std::string range = "1.." + std::to_string(limits_.max_tokens_limit);
    std::optional<uint32_t> given;
    // max_completion_tokens is the newer name of max_tokens; both are taken, on both endpoints.
    for (const std::string name : {"max_tokens", "max_completion_tokens"}) {
      const json* v = field(doc_, name);
      if (!v) continue;
      if (!v->is_number_integer()) return wrong_type(name, "an integer in " + range, *v);
      // A negative integer is not number_unsigned.
      if (!v->is_number_unsigned() || v->get<uint64_t>() < 1 ||
          v->get<uint64_t>() > limits_.max_tokens_limit) {
        return invalid(name, in_quotes(name) + " is " + v->dump() + "; it must be in " + range);
      }
      auto n = static_cast<uint32_t>(v->get<uint64_t>());
      if (given && *given != n) {
        return invalid(name, "\"max_tokens\" (" + std::to_string(*given) +
                                 ") and \"max_completion_tokens\" (" + std::to_string(n) +
                                 ") differ; send one of them");
      }
      given = n;
    }
    out_.max_tokens = given.value_or(limits_.default_max_tokens);
    return {};
  }

  Failure sampling() {
    SamplingFields fields;
    if (auto e = parse_sampling_fields(doc_, fields)) return e;
    out_.sampling = fields.params;
    out_.seed_given = fields.seed_given;
    return {};
  }

  Failure constraint() { return parse_constraint_fields(doc_, out_.constraint); }

  // llama-server's "ignore_eos": the serving benchmarks send it to get exactly max_tokens tokens.
  Failure ignore_eos() {
    const json* v = field(doc_, "ignore_eos");
    if (!v) return {};
    if (!v->is_boolean()) return wrong_type("ignore_eos", "a boolean", *v);
    out_.ignore_eos = v->get<bool>();
    return {};
  }

  // Chat only (completions ignores them as unknown fields). A forced call is a grammar of its own.
  Failure tools() {
    if (endpoint_ != Endpoint::chat) return {};
    if (auto e = parse_tool_fields(doc_, body_, out_.tools)) return e;
    const auto c = out_.tools.choice;
    if ((c == Tools::Choice::required || c == Tools::Choice::named) &&
        out_.constraint.kind != Constraint::Kind::none)
      return invalid("tool_choice", "\"tool_choice\" forces a tool call and " +
                                        in_quotes(out_.constraint.param) +
                                        " constrains the answer; send one of them");
    return {};
  }

  Failure stop() {
    const json* v = field(doc_, "stop");
    if (!v) return {};
    if (v->is_string()) return stop_string(*v, "stop");
    if (!v->is_array()) return wrong_type("stop", "a string or an array of up to 4 strings", *v);
    if (v->size() > kMaxStops) {
      return invalid("stop", "\"stop\" holds " + std::to_string(v->size()) + " strings; at most " +
                                 std::to_string(kMaxStops) + " are allowed");
    }
    for (size_t i = 0; i < v->size(); ++i) {
      if (auto e = stop_string((*v)[i], "stop[" + std::to_string(i) + "]")) return e;
    }
    return {};
  }

  Failure stream() {
    if (const json* v = field(doc_, "stream")) {
      if (!v->is_boolean()) return wrong_type("stream", "a boolean", *v);
      out_.stream = v->get<bool>();
    }
    const json* options = field(doc_, "stream_options");
    if (!options) return {};
    if (!out_.stream) {
      return invalid("stream_options", "\"stream_options\" is only allowed when \"stream\" is true");
    }
    if (!options->is_object()) return wrong_type("stream_options", "an object", *options);
    if (const json* v = field(*options, "include_usage")) {
      if (!v->is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", *v);
      out_.include_usage = v->get<bool>();
    }
    return {};
  }

  // Chat: "logprobs" (boolean) and "top_logprobs" (0..20, only with logprobs); completions: "logprobs"
  // (0..5 alternatives; any integer asks for the chosen tokens' too). llama-server's "n_probs" (0..20) asks
  // for them with that many alternatives on either route, and must agree with the OpenAI fields if both are
  // sent. docs/http-api.md, "Log probabilities".
  Failure logprobs() {
    model::SamplingParams& p = out_.sampling;
    if (endpoint_ == Endpoint::chat) {
      if (const json* v = field(doc_, "logprobs")) {
        if (!v->is_boolean()) return wrong_type("logprobs", "a boolean", *v);
        p.logprobs = v->get<bool>();
      }
      if (auto e = count("top_logprobs", model::kMaxTopLogprobs, p.top_logprobs)) return e;
      if (p.top_logprobs > 0 && !p.logprobs)
        return invalid("top_logprobs", "\"top_logprobs\" needs \"logprobs\": true");
    } else if (field(doc_, "logprobs")) {
      if (auto e = count("logprobs", kMaxCompletionLogprobs, p.top_logprobs)) return e;
      p.logprobs = true;
    }
    uint32_t n_probs = 0;
    if (auto e = count("n_probs", model::kMaxTopLogprobs, n_probs)) return e;
    if (n_probs == 0) return {};
    if (p.logprobs && p.top_logprobs != n_probs)
      return invalid("n_probs",
                     "\"n_probs\" (" + std::to_string(n_probs) +
                         ") asks for other log probabilities than \"logprobs\"/\"top_logprobs\" (" +
                         std::to_string(p.top_logprobs) + " alternatives); send one of them");
    p.logprobs = true;
    p.top_logprobs = n_probs;
    return {};
  }

  // Known fields that would change the answer in ways epd cannot honour.
  Failure refused() {
    if (const json* v = field(doc_, "n")) {
      if (!v->is_number_integer()) return wrong_type("n", "an integer", *v);
      if (!v->is_number_unsigned() || v->get<uint64_t>() < 1 || v->get<uint64_t>() > kMaxChoices) {
        return invalid("n", "\"n\" is " + v->dump() + "; it must be in 1.." + std::to_string(kMaxChoices));
      }
      out_.n = v->get<uint32_t>();
    }
    if (auto e = refuse_llama_server_fields(doc_)) return e;
    return endpoint_ == Endpoint::completions ? refused_completions() : refused_chat();
  }

 private:
  Failure refused_completions() {
    if (const json* v = field(doc_, "best_of")) {
      if (!v->is_number_integer()) return wrong_type("best_of", "an integer", *v);
      if (!v->is_number_unsigned() || v->get<uint64_t>() != 1) {
        return unsupported("best_of", "\"best_of\" other than 1");
      }
    }
    if (const json* v = field(doc_, "echo")) {
      if (!v->is_boolean()) return wrong_type("echo", "a boolean", *v);
      if (v->get<bool>()) return unsupported("echo", "\"echo\": true");
    }
    if (const json* v = field(doc_, "suffix")) {
      if (!v->is_string()) return wrong_type("suffix", "a string", *v);
      if (!v->get_ref<const std::string&>().empty()) return unsupported("suffix", "\"suffix\" (insertion)");
    }
    return {};
  }

  Failure refused_chat() {
    if (field(doc_, "audio")) return unsupported("audio", "\"audio\" output");
    if (const json* v = field(doc_, "modalities")) {
      if (!v->is_array()) return wrong_type("modalities", "an array of strings", *v);
      for (const auto& m : *v) {
        if (m != "text") return unsupported("modalities", "output other than \"text\"");
      }
    }
    return {};
  }

  Failure stop_string(const json& v, const std::string& param) {
    if (!v.is_string()) return wrong_type(param, "a string", v);
    const auto& s = v.get_ref<const std::string&>();
    if (s.empty()) return invalid(param, in_quotes(param) + " must not be empty");
    if (s.size() > limits_.max_stop_bytes) {
      return invalid(param, in_quotes(param) + " is " + std::to_string(s.size()) + " bytes; the limit is " +
                                std::to_string(limits_.max_stop_bytes) + " bytes");
    }
    out_.stop.push_back(s);
    return {};
  }

  // An integer field in 0..max into `out`; absent: `out` unchanged.
  Failure count(const std::string& name, uint32_t max, uint32_t& out) {
    const json* v = field(doc_, name);
    if (!v) return {};
    const std::string range = "an integer in 0.." + std::to_string(max);
    if (!v->is_number_integer()) return wrong_type(name, range, *v);
    if (!v->is_number_unsigned() || v->get<uint64_t>() > max)
      return invalid(name, in_quotes(name) + " is " + v->dump() + "; it must be " + range);
    out = uint32_t(v->get<uint64_t>());
    return {};
  }

  Endpoint endpoint_;
  const json& doc_;
  std::string_view body_;
  const Limits& limits_;
  Request& out_;
};

}  // namespace

std::variant<Request, HttpError> parse_request(Endpoint endpoint, std::string_view body,
                                               const Limits& limits) {
  auto parsed = parse_json_object(body, limits.max_json_depth);
  if (auto* e = std::get_if<HttpError>(&parsed)) return std::move(*e);
  const json& doc = std::get<json>(parsed);

  Request request;
  request.endpoint = endpoint;
  Parser p(endpoint, doc, body, limits, request);
  auto input = endpoint == Endpoint::completions ? &Parser::prompt : &Parser::messages;
  for (auto step :
       {&Parser::model, input, &Parser::max_tokens, &Parser::sampling, &Parser::logprobs, &Parser::stop,
        &Parser::stream, &Parser::refused, &Parser::constraint, &Parser::tools, &Parser::ignore_eos}) {
    if (auto e = (p.*step)()) return std::move(*e);
  }
  return request;
}

}  // namespace epd::http::openai
