#include "epd/http/openai_reply.hpp"

#include <nlohmann/json.hpp>

namespace epd::http::openai {
namespace {

// Keys in insertion order, so bodies read in OpenAI's order (id, object, created, model, choices, usage).
using json = nlohmann::ordered_json;

// Never throws on bad UTF-8 (replies must always be writable); TextStream's text is valid anyway.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* finish_name(FinishReason r) {
  return r == FinishReason::length ? "length" : "stop";
}

json head_json(const ResponseHead& h, bool chunk) {
  const char* object = h.endpoint == Endpoint::completions ? "text_completion"
                       : chunk                             ? "chat.completion.chunk"
                                                           : "chat.completion";
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", uint64_t{u.prompt_tokens} + u.completion_tokens}};
}

json extras_json(const Extras& e) {
  return {{"request_id", e.request_id},
          {"room", e.room},
          {"attempts", e.attempts},
          {"first_token_ms", e.first_token_ms},
          {"total_ms", e.total_ms}};
}

// A choice of a streamed chunk: a completions chunk carries "text", a chat chunk a "delta".
json chunk_choice(Endpoint endpoint, json text_or_delta, json finish_reason) {
  if (endpoint == Endpoint::completions) {
    return {{"text", std::move(text_or_delta)},
            {"index", 0},
            {"logprobs", nullptr},
            {"finish_reason", std::move(finish_reason)}};
  }
  return {{"index", 0},
          {"delta", std::move(text_or_delta)},
          {"logprobs", nullptr},
          {"finish_reason", std::move(finish_reason)}};
}

}  // namespace

std::string_view error_type(int status) {
  if (status >= 500) return "server_error";
  if (status == 429) return "requests";
  return "invalid_request_error";
}

std::string error_body(const HttpError& e) {
  json error = {{"message", e.message},
                {"type", error_type(e.status)},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return dump({{"error", std::move(error)}});
}

std::string response_id(Endpoint endpoint, std::string_view unique) {
  return (endpoint == Endpoint::completions ? "cmpl-" : "chatcmpl-") + std::string(unique);
}

std::string completion_body(const ResponseHead& head, std::string_view text, FinishReason finish,
                            const Usage& usage, const Extras& extras) {
  json choice;
  if (head.endpoint == Endpoint::completions) {
    choice = {{"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_name(finish)}};
  } else {
    choice = {{"index", 0},
              {"message", {{"role", "assistant"}, {"content", text}}},
              {"logprobs", nullptr},
              {"finish_reason", finish_name(finish)}};
  }
  json body = head_json(head, false);
  body["choices"] = json::array({std::move(choice)});
  body["usage"] = usage_json(usage);
  body["epd"] = extras_json(extras);
  return dump(body);
}

std::string sse_data(std::string_view json) {
  return "data: " + std::string(json) + "\n\n";
}

StreamRenderer::StreamRenderer(ResponseHead head, bool include_usage)
    : head_(std::move(head)), include_usage_(include_usage) {}

std::string StreamRenderer::start() {
  return role_if_not_sent();
}

std::string StreamRenderer::role_if_not_sent() {
  if (started_) return {};
  started_ = true;
  if (head_.endpoint == Endpoint::completions) return {};  // its chunks carry no role
  json chunk = head_json(head_, true);
  chunk["choices"] =
      json::array({chunk_choice(head_.endpoint, {{"role", "assistant"}, {"content", ""}}, nullptr)});
  if (include_usage_) chunk["usage"] = nullptr;
  return sse_data(dump(chunk));
}

std::string StreamRenderer::text(std::string_view delta) {
  std::string out = role_if_not_sent();
  if (delta.empty()) return out;
  json payload = head_.endpoint == Endpoint::completions ? json(delta) : json{{"content", delta}};
  json chunk = head_json(head_, true);
  chunk["choices"] = json::array({chunk_choice(head_.endpoint, std::move(payload), nullptr)});
  if (include_usage_) chunk["usage"] = nullptr;
  return out + sse_data(dump(chunk));
}

std::string StreamRenderer::finish(FinishReason reason, const Usage& usage, const Extras& extras) {
  std::string out = role_if_not_sent();
  json payload = head_.endpoint == Endpoint::completions ? json("") : json::object();
  json chunk = head_json(head_, true);
  chunk["choices"] = json::array({chunk_choice(head_.endpoint, std::move(payload), finish_name(reason))});
  if (include_usage_) chunk["usage"] = nullptr;
  chunk["epd"] = extras_json(extras);
  out += sse_data(dump(chunk));
  if (include_usage_) {
    json last = head_json(head_, true);
    last["choices"] = json::array();
    last["usage"] = usage_json(usage);
    out += sse_data(dump(last));
  }
  out += kSseDone;
  return out;
}

std::string StreamRenderer::error(const HttpError& e) const {
  return sse_data(error_body(e)) + std::string(kSseDone);
}

}  // namespace epd::http::openai
