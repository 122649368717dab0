#include "epd/http/openai_reply.hpp"

#include <nlohmann/json.hpp>

#include "epd/http/utf8.hpp"

namespace epd::http::openai {
namespace {

// Keys in insertion order, so bodies read in OpenAI's order (id, object, created, model, choices, usage).
using json = nlohmann::ordered_json;

// Never throws on bad UTF-8 (replies must always be writable); TextStream's text is valid anyway.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::length:
      return "length";
    case FinishReason::tool_calls:
      return "tool_calls";
    case FinishReason::stop:
      break;
  }
  return "stop";
}

// A call as OpenAI writes it; a streamed one starts with its "index" among the choice's calls.
json tool_call_json(const model::ToolCall& c, std::optional<size_t> index = std::nullopt) {
  json out = index ? json{{"index", *index}} : json::object();
  out["id"] = c.id;
  out["type"] = "function";
  out["function"] = {{"name", c.name}, {"arguments", c.arguments}};
  return out;
}

// OpenAI always sends "refusal" (null: epd's models refuse in their text, if at all).
json chat_message(const Choice& c) {
  json m = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
  if (!c.reasoning_content.empty()) m["reasoning_content"] = c.reasoning_content;
  if (c.tool_calls.empty()) return m;
  // Next to calls, the text between them and the model's line breaks is trimmed; none at all is null.
  const size_t b = c.text.find_first_not_of(" \t\n\r");
  if (b == std::string::npos)
    m["content"] = nullptr;
  else
    m["content"] = c.text.substr(b, c.text.find_last_not_of(" \t\n\r") - b + 1);
  json calls = json::array();
  for (const auto& call : c.tool_calls) calls.push_back(tool_call_json(call));
  m["tool_calls"] = std::move(calls);
  return m;
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
json chunk_choice(Endpoint endpoint, uint32_t index, json text_or_delta, json finish_reason,
                  json logprobs = nullptr) {
  if (endpoint == Endpoint::completions) {
    return {{"text", std::move(text_or_delta)},
            {"index", index},
            {"logprobs", std::move(logprobs)},
            {"finish_reason", std::move(finish_reason)}};
  }
  return {{"index", index},
          {"delta", std::move(text_or_delta)},
          {"logprobs", std::move(logprobs)},
          {"finish_reason", std::move(finish_reason)}};
}

// Code points of valid UTF-8 (every byte but continuation bytes starts one).
size_t code_points(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Chat's {"token", "logprob", "bytes"} of one token.
json chat_entry(const LogprobEntry& e) {
  json bytes = json::array();
  for (unsigned char c : e.bytes) bytes.push_back(int(c));
  return {{"token", to_valid_utf8(e.bytes)}, {"logprob", double(e.logprob)}, {"bytes", std::move(bytes)}};
}

// The "logprobs" of a choice or chunk. Completions' text_offset counts code points of the tokens' texts
// from `offset` on, which it advances.
json logprobs_json(Endpoint endpoint, std::span<const TokenLogprob> entries, size_t& offset) {
  if (endpoint == Endpoint::chat) {
    json content = json::array();
    for (const TokenLogprob& t : entries) {
      json e = chat_entry(t.chosen);
      json top = json::array();
      for (const LogprobEntry& alt : t.top) top.push_back(chat_entry(alt));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprob& t : entries) {
    const std::string text = to_valid_utf8(t.chosen.bytes);
    tokens.push_back(text);
    values.push_back(double(t.chosen.logprob));
    json top = json::object();  // two alternatives with the same text keep the likelier (listed first)
    for (const LogprobEntry& alt : t.top) top.emplace(to_valid_utf8(alt.bytes), double(alt.logprob));
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += code_points(text);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(values)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
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

std::string completion_body(const ResponseHead& head, std::span<const Choice> choices, const Usage& usage) {
  json body = head_json(head, false);
  body["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    size_t offset = 0;
    json logprobs = c.logprobs ? logprobs_json(head.endpoint, *c.logprobs, offset) : json(nullptr);
    if (head.endpoint == Endpoint::completions) {
      body["choices"].push_back({{"text", c.text},
                                 {"index", i},
                                 {"logprobs", std::move(logprobs)},
                                 {"finish_reason", finish_name(c.finish)}});
    } else {
      body["choices"].push_back({{"index", i},
                                 {"message", chat_message(c)},
                                 {"logprobs", std::move(logprobs)},
                                 {"finish_reason", finish_name(c.finish)}});
    }
  }
  body["usage"] = usage_json(usage);
  if (!choices.empty()) body["epd"] = extras_json(choices[0].extras);
  if (choices.size() > 1) {
    json each = json::array();
    for (const Choice& c : choices) each.push_back(extras_json(c.extras));
    body["epd"]["choices"] = std::move(each);
  }
  return dump(body);
}

std::string completion_body(const ResponseHead& head, std::string_view text, FinishReason finish,
                            const Usage& usage, const Extras& extras) {
  const Choice one{std::string(text), finish, extras};
  return completion_body(head, std::span(&one, 1), usage);
}

std::string sse_data(std::string_view json) {
  return "data: " + std::string(json) + "\n\n";
}

StreamRenderer::StreamRenderer(ResponseHead head, bool include_usage, uint32_t choices, bool logprobs)
    : head_(std::move(head)),
      include_usage_(include_usage),
      choices_(choices),
      logprobs_(logprobs),
      text_offset_(choices, 0) {}

std::string StreamRenderer::start() {
  return role_if_not_sent();
}

std::string StreamRenderer::role_if_not_sent() {
  if (started_) return {};
  started_ = true;
  if (head_.endpoint == Endpoint::completions) return {};  // its chunks carry no role
  std::string out;
  for (uint32_t i = 0; i < choices_; ++i) {
    json chunk = head_json(head_, true);
    chunk["choices"] =
        json::array({chunk_choice(head_.endpoint, i, {{"role", "assistant"}, {"content", ""}}, nullptr)});
    if (include_usage_) chunk["usage"] = nullptr;
    out += sse_data(dump(chunk));
  }
  return out;
}

std::string StreamRenderer::text(std::string_view delta, uint32_t index,
                                 std::span<const TokenLogprob> logprobs) {
  std::string out = role_if_not_sent();
  if (delta.empty()) return out;
  json payload = head_.endpoint == Endpoint::completions ? json(delta) : json{{"content", delta}};
  json lp = logprobs_ ? logprobs_json(head_.endpoint, logprobs, text_offset_.at(index)) : json(nullptr);
  json chunk = head_json(head_, true);
  chunk["choices"] =
      json::array({chunk_choice(head_.endpoint, index, std::move(payload), nullptr, std::move(lp))});
  if (include_usage_) chunk["usage"] = nullptr;
  return out + sse_data(dump(chunk));
}

std::string StreamRenderer::reasoning(std::string_view delta, uint32_t index) {
  std::string out = role_if_not_sent();
  if (delta.empty()) return out;
  json chunk = head_json(head_, true);
  chunk["choices"] =
      json::array({chunk_choice(head_.endpoint, index, {{"reasoning_content", delta}}, nullptr)});
  if (include_usage_) chunk["usage"] = nullptr;
  return out + sse_data(dump(chunk));
}

std::string StreamRenderer::tool_calls(std::span<const model::ToolCall> calls, uint32_t index) {
  std::string out = role_if_not_sent();
  for (size_t k = 0; k < calls.size(); ++k) {
    json call = tool_call_json(calls[k], k);
    json chunk = head_json(head_, true);
    chunk["choices"] = json::array(
        {chunk_choice(head_.endpoint, index, {{"tool_calls", json::array({std::move(call)})}}, nullptr)});
    if (include_usage_) chunk["usage"] = nullptr;
    out += sse_data(dump(chunk));
  }
  return out;
}

std::string StreamRenderer::finish_choice(uint32_t index, FinishReason reason, const Extras& extras,
                                          std::span<const TokenLogprob> logprobs) {
  std::string out = role_if_not_sent();
  json payload = head_.endpoint == Endpoint::completions ? json("") : json::object();
  json lp = logprobs_ && !logprobs.empty() ? logprobs_json(head_.endpoint, logprobs, text_offset_.at(index))
                                           : json(nullptr);
  json chunk = head_json(head_, true);
  chunk["choices"] = json::array(
      {chunk_choice(head_.endpoint, index, std::move(payload), finish_name(reason), std::move(lp))});
  if (include_usage_) chunk["usage"] = nullptr;
  chunk["epd"] = extras_json(extras);
  return out + sse_data(dump(chunk));
}

std::string StreamRenderer::finish(FinishReason reason, const Usage& usage, const Extras& extras) {
  std::string out = finish_choice(0, reason, extras);  // first: the operands of + run in any order
  return out + end(usage);
}

std::string StreamRenderer::end(const Usage& usage) {
  std::string out = role_if_not_sent();
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
