#include "responses_reply.hpp"

namespace epd::http::responses {
namespace {

using json = nlohmann::ordered_json;
using openai::FinishReason;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n\r");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\n\r") - b + 1);
}

json output_text(const std::string& text) {
  return {
      {"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

class ResponsesShape final : public AnswerShape {
 public:
  ResponsesShape(std::string id, int64_t created, std::string model, json settings, std::string unique)
      : id_(std::move(id)),
        created_(created),
        model_(std::move(model)),
        settings_(std::move(settings)),
        item_prefix_(std::move(unique)) {}

  const char* route() const override { return "/v1/responses"; }

  std::string start() override {
    json r = response("in_progress", json::array(), nullptr, nullptr);
    std::string out = event({{"type", "response.created"}, {"response", r}});
    return out + event({{"type", "response.in_progress"}, {"response", r}});
  }

  std::string text(std::string_view delta, uint32_t, std::span<const openai::TokenLogprob>) override {
    if (delta.empty()) return {};
    std::string out;
    if (open_ != Open::message) {
      out = close();
      out += add_item({{"id", new_id("msg")},
                       {"type", "message"},
                       {"status", "in_progress"},
                       {"role", "assistant"},
                       {"content", json::array()}},
                      Open::message);
      out += event({{"type", "response.content_part.added"},
                    {"item_id", item_id_},
                    {"output_index", output_.size()},
                    {"content_index", 0},
                    {"part", output_text("")}});
    }
    text_ += delta;
    return out + event({{"type", "response.output_text.delta"},
                        {"item_id", item_id_},
                        {"output_index", output_.size()},
                        {"content_index", 0},
                        {"delta", delta},
                        {"logprobs", json::array()}});
  }

  std::string reasoning(std::string_view delta, uint32_t) override {
    if (delta.empty()) return {};
    std::string out;
    if (open_ != Open::reasoning) {
      out = close();
      out += add_item({{"id", new_id("rs")}, {"type", "reasoning"}, {"summary", json::array()}},
                      Open::reasoning);
    }
    text_ += delta;
    return out + event({{"type", "response.reasoning_text.delta"},
                        {"item_id", item_id_},
                        {"output_index", output_.size()},
                        {"content_index", 0},
                        {"delta", delta}});
  }

  std::string tool_calls(std::span<const model::ToolCall> calls, uint32_t) override {
    std::string out = close();
    for (const auto& c : calls) {
      json item = call_item(c, "in_progress");
      item["arguments"] = "";
      out += add_item(item, Open::call);
      out += event({{"type", "response.function_call_arguments.delta"},
                    {"item_id", item_id_},
                    {"output_index", output_.size()},
                    {"delta", c.arguments}});
      out += event({{"type", "response.function_call_arguments.done"},
                    {"item_id", item_id_},
                    {"name", c.name},
                    {"output_index", output_.size()},
                    {"arguments", c.arguments}});
      item = call_item(c, "completed");
      item["id"] = item_id_;
      out += done_item(std::move(item));
    }
    return out;
  }

  std::string finish_choice(uint32_t, FinishReason reason, std::string_view, const openai::Extras&,
                            std::span<const openai::TokenLogprob>) override {
    reason_ = reason;
    return close();
  }

  std::string end(const openai::Usage& usage) override {
    const bool complete = reason_ != FinishReason::length;
    json r = response(complete ? "completed" : "incomplete", output_, usage_json(usage),
                      complete ? json(nullptr) : json{{"reason", "max_output_tokens"}});
    return event(
        {{"type", complete ? "response.completed" : "response.incomplete"}, {"response", std::move(r)}});
  }

  std::string stream_error(const HttpError& e) override {
    return event({{"type", "error"},
                  {"code", e.code.empty() ? json(nullptr) : json(e.code)},
                  {"message", e.message},
                  {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
  }

  std::string body(std::span<const openai::Choice> choices, const openai::Usage& usage) override {
    const openai::Choice& c = choices.front();
    json output = json::array();
    if (!c.reasoning_content.empty()) output.push_back(reasoning_item(new_id("rs"), c.reasoning_content));
    const std::string text = c.tool_calls.empty() ? c.text : trimmed(c.text);
    if (!text.empty() || c.tool_calls.empty()) output.push_back(message_item(new_id("msg"), text));
    for (const auto& call : c.tool_calls) output.push_back(call_item(call, "completed"));
    const bool complete = c.finish != FinishReason::length;
    return dump(response(complete ? "completed" : "incomplete", std::move(output), usage_json(usage),
                         complete ? json(nullptr) : json{{"reason", "max_output_tokens"}}));
  }

  std::string error_body(const HttpError& e) const override { return openai::error_body(e); }

 private:
  enum class Open { none, message, reasoning, call };

  json response(const char* status, json output, json usage, json incomplete) const {
    json r = {{"id", id_},        {"object", "response"},       {"created_at", created_},
              {"status", status}, {"error", nullptr},           {"incomplete_details", std::move(incomplete)},
              {"model", model_},  {"output", std::move(output)}};
    for (const auto& [key, value] : settings_.items()) r[key] = value;
    r["previous_response_id"] = nullptr;
    r["store"] = false;
    r["truncation"] = "disabled";
    r["metadata"] = json::object();
    r["usage"] = std::move(usage);
    return r;
  }

  static json usage_json(const openai::Usage& u) {
    return {{"input_tokens", u.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", 0}, {"cache_write_tokens", 0}}},
            {"output_tokens", u.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  }

  static json message_item(const std::string& id, const std::string& text) {
    return {{"id", id},
            {"type", "message"},
            {"status", "completed"},
            {"role", "assistant"},
            {"content", json::array({output_text(text)})}};
  }

  static json reasoning_item(const std::string& id, const std::string& text) {
    return {{"id", id},
            {"type", "reasoning"},
            {"summary", json::array()},
            {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
  }

  json call_item(const model::ToolCall& c, const char* status) {
    return {{"id", new_id("fc")},       {"type", "function_call"}, {"status", status},
            {"arguments", c.arguments}, {"call_id", c.id},         {"name", c.name}};
  }

  // Item ids: the response's unique part and a counter.
  std::string new_id(const char* prefix) {
    return std::string(prefix) + "_" + item_prefix_ + "_" + std::to_string(items_++);
  }

  std::string event(json data) {
    data["sequence_number"] = sequence_++;
    return "event: " + data["type"].get<std::string>() + "\ndata: " + dump(data) + "\n\n";
  }

  std::string add_item(json item, Open kind) {
    item_id_ = item["id"];
    open_ = kind;
    text_.clear();
    return event({{"type", "response.output_item.added"},
                  {"output_index", output_.size()},
                  {"item", std::move(item)}});
  }

  std::string done_item(json item) {
    std::string out =
        event({{"type", "response.output_item.done"}, {"output_index", output_.size()}, {"item", item}});
    output_.push_back(std::move(item));
    open_ = Open::none;
    return out;
  }

  // Ends the open message or reasoning item with its whole text.
  std::string close() {
    std::string out;
    if (open_ == Open::message) {
      out += event({{"type", "response.output_text.done"},
                    {"item_id", item_id_},
                    {"output_index", output_.size()},
                    {"content_index", 0},
                    {"text", text_},
                    {"logprobs", json::array()}});
      out += event({{"type", "response.content_part.done"},
                    {"item_id", item_id_},
                    {"output_index", output_.size()},
                    {"content_index", 0},
                    {"part", output_text(text_)}});
      out += done_item(message_item(item_id_, text_));
    } else if (open_ == Open::reasoning) {
      out += event({{"type", "response.reasoning_text.done"},
                    {"item_id", item_id_},
                    {"output_index", output_.size()},
                    {"content_index", 0},
                    {"text", text_}});
      out += done_item(reasoning_item(item_id_, text_));
    }
    return out;
  }

  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const json settings_;
  const std::string item_prefix_;
  json output_ = json::array();  // the items done so far (streamed)
  Open open_ = Open::none;
  std::string item_id_, text_;  // the open item's
  uint64_t sequence_ = 0, items_ = 0;
  FinishReason reason_ = FinishReason::stop;
};

}  // namespace

std::unique_ptr<AnswerShape> make_shape(std::string unique, int64_t created, std::string model,
                                        json settings) {
  return std::make_unique<ResponsesShape>("resp_" + unique, created, std::move(model), std::move(settings),
                                          unique);
}

}  // namespace epd::http::responses
