#include "anthropic_reply.hpp"

#include <nlohmann/json.hpp>

namespace epd::http::anthropic {
namespace {

using json = nlohmann::ordered_json;
using openai::FinishReason;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Anthropic's SSE frame: the event's name, then its JSON (whose "type" repeats the name).
std::string event(const json& data) {
  return "event: " + data["type"].get<std::string>() + "\ndata: " + dump(data) + "\n\n";
}

std::string error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

const char* stop_reason(FinishReason r, std::string_view stop_sequence) {
  if (r == FinishReason::tool_calls) return "tool_use";
  if (r == FinishReason::length) return "max_tokens";
  return stop_sequence.empty() ? "end_turn" : "stop_sequence";
}

json input_of(const model::ToolCall& c) {
  json input = json::parse(c.arguments, nullptr, false);
  return input.is_object() ? input : json::object();
}

// Text next to calls loses the model's surrounding whitespace, as the chat route trims it.
std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n\r");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\n\r") - b + 1);
}

class MessagesShape final : public AnswerShape {
 public:
  MessagesShape(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}

  const char* route() const override { return "/v1/messages"; }

  // The prompt's length is known when the answer ends: message_delta's usage carries it.
  std::string start() override {
    json message = head();
    message["content"] = json::array();
    message["stop_reason"] = nullptr;
    message["stop_sequence"] = nullptr;
    message["usage"] = {{"input_tokens", 0}, {"output_tokens", 0}};
    return event({{"type", "message_start"}, {"message", std::move(message)}}) + event({{"type", "ping"}});
  }

  std::string text(std::string_view delta, uint32_t, std::span<const openai::TokenLogprob>) override {
    if (delta.empty()) return {};
    std::string out = open("text", {{"type", "text"}, {"text", ""}});  // first: it sets index_
    return out + event({{"type", "content_block_delta"},
                        {"index", index_},
                        {"delta", {{"type", "text_delta"}, {"text", delta}}}});
  }

  std::string reasoning(std::string_view delta, uint32_t) override {
    if (delta.empty()) return {};
    std::string out = open("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    return out + event({{"type", "content_block_delta"},
                        {"index", index_},
                        {"delta", {{"type", "thinking_delta"}, {"thinking", delta}}}});
  }

  std::string tool_calls(std::span<const model::ToolCall> calls, uint32_t) override {
    std::string out = close();
    for (const auto& c : calls) {
      out +=
          open("tool_use", {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}});
      out += event({{"type", "content_block_delta"},
                    {"index", index_},
                    {"delta", {{"type", "input_json_delta"}, {"partial_json", input_of(c).dump()}}}});
      out += close();
    }
    return out;
  }

  std::string finish_choice(uint32_t, FinishReason reason, std::string_view stop_sequence,
                            const openai::Extras&, std::span<const openai::TokenLogprob>) override {
    reason_ = reason;
    stop_sequence_ = stop_sequence;
    return close();
  }

  std::string end(const openai::Usage& usage) override {
    json delta = {{"stop_reason", stop_reason(reason_, stop_sequence_)},
                  {"stop_sequence", stop_sequence_.empty() ? json(nullptr) : json(stop_sequence_)}};
    return event({{"type", "message_delta"},
                  {"delta", std::move(delta)},
                  {"usage",
                   {{"input_tokens", usage.prompt_tokens}, {"output_tokens", usage.completion_tokens}}}}) +
           event({{"type", "message_stop"}});
  }

  std::string stream_error(const HttpError& e) override {
    return "event: error\ndata: " + error_body(e) + "\n\n";
  }

  std::string body(std::span<const openai::Choice> choices, const openai::Usage& usage) override {
    const openai::Choice& c = choices.front();
    json content = json::array();
    if (!c.reasoning_content.empty())
      content.push_back({{"type", "thinking"}, {"thinking", c.reasoning_content}, {"signature", ""}});
    const std::string text = c.tool_calls.empty() ? c.text : trimmed(c.text);
    if (!text.empty() || (c.tool_calls.empty() && content.empty()))
      content.push_back({{"type", "text"}, {"text", text}});
    for (const auto& call : c.tool_calls)
      content.push_back(
          {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", input_of(call)}});
    json message = head();
    message["content"] = std::move(content);
    message["stop_reason"] = stop_reason(c.finish, c.stop_sequence);
    message["stop_sequence"] = c.stop_sequence.empty() ? json(nullptr) : json(c.stop_sequence);
    message["usage"] = {{"input_tokens", usage.prompt_tokens}, {"output_tokens", usage.completion_tokens}};
    return dump(message);
  }

  std::string error_body(const HttpError& e) const override { return anthropic::error_body(e); }

 private:
  json head() const { return {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}}; }

  // Opens a block of `kind` unless one is open: the open block of another kind is closed first.
  std::string open(const char* kind, json block) {
    if (open_ == kind) return {};
    std::string out = close();
    index_ = next_index_++;
    open_ = kind;
    return out +
           event({{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
  }

  std::string close() {
    if (open_.empty()) return {};
    open_.clear();
    return event({{"type", "content_block_stop"}, {"index", index_}});
  }

  const std::string id_, model_;
  std::string open_;  // the kind of the open block; empty: none
  size_t index_ = 0, next_index_ = 0;
  FinishReason reason_ = FinishReason::stop;
  std::string stop_sequence_;
};

}  // namespace

std::string error_body(const HttpError& e) {
  return dump({{"type", "error"}, {"error", {{"type", error_type(e.status)}, {"message", e.message}}}});
}

std::unique_ptr<AnswerShape> make_shape(std::string id, std::string model) {
  return std::make_unique<MessagesShape>(std::move(id), std::move(model));
}

std::string count_body(size_t input_tokens) {
  return dump({{"input_tokens", input_tokens}});
}

}  // namespace epd::http::anthropic
