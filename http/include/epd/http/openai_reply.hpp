#pragma once
// Every body the OpenAI-compatible routes send, in OpenAI's shapes and key order: errors, non-streamed
// answers, and the Server-Sent Events of a streamed answer. Pure: the HTTP session supplies the response's
// id, creation time and model, and per event the text, finish reason and usage; docs/http-api.md shows each
// body. Text is put into JSON by nlohmann, never escaped by hand.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/http/http_request.hpp"
#include "epd/http/openai_request.hpp"

namespace epd::http::openai {

// OpenAI's error `type` for an HTTP status: "server_error" for 5xx, "requests" for 429 (OpenAI's type for a
// request-rate limit), "invalid_request_error" for every other status (OpenAI uses it for 401 and 404 too).
std::string_view error_type(int status);

// {"error": {"message": ..., "type": ..., "param": null or "...", "code": epd's error name}}. The one error
// shape of every epd HTTP route.
std::string error_body(const HttpError& e);

enum class FinishReason {
  stop,        // the model's end of text, or a stop string
  length,      // max_tokens reached
  tool_calls,  // the answer is tool calls (chat)
};

struct Usage {
  uint32_t prompt_tokens = 0;  // image tokens included
  uint32_t completion_tokens = 0;
};

// epd's own figures, sent as "epd": {...} on the final answer or finish chunk; OpenAI clients ignore unknown
// fields. The load generator compares first_token_ms (the router's TTFT) with the TTFT it measured.
struct Extras {
  std::string request_id;
  uint64_t room = 0;  // printed exactly: JavaScript clients need a BigInt-aware parser
  uint32_t attempts = 0;
  double first_token_ms = 0;
  double total_ms = 0;
};

// What every body of one answer repeats.
struct ResponseHead {
  Endpoint endpoint = Endpoint::completions;
  std::string id;       // response_id() makes one
  int64_t created = 0;  // unix seconds
  std::string model;
};

// "cmpl-<unique>" or "chatcmpl-<unique>", the prefixes OpenAI's ids carry.
std::string response_id(Endpoint endpoint, std::string_view unique);

// A token as logprobs show it: its bytes as the model's detokenizer gives them (the text is those bytes
// as valid UTF-8, a byte that is not is U+FFFD; `bytes` lists them as they are) and its log-probability.
struct LogprobEntry {
  std::string bytes;
  float logprob = 0;
};

// One generated token's entry: the token, then its most likely alternatives, most likely first.
struct TokenLogprob {
  LogprobEntry chosen;
  std::vector<LogprobEntry> top{};
};

// One choice of a non-streamed answer.
struct Choice {
  std::string text;
  FinishReason finish = FinishReason::stop;
  Extras extras;
  // One per generated token when the request asked for logprobs; nullopt: "logprobs": null. Chat renders
  // {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": null}, completions
  // {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
  std::optional<std::vector<TokenLogprob>> logprobs{};
  // Chat: the calls the answer made (ids given); "content" is then `text` trimmed, null if that is empty.
  std::vector<model::ToolCall> tool_calls{};
  // Chat: the thinking the template's parser read out of the answer (llama-server's reasoning_content);
  // empty: none, and no such key.
  std::string reasoning_content{};
  // The stop string that ended the choice (Anthropic's stop_sequence); empty: none did.
  std::string stop_sequence{};
};

// A non-streamed answer: a "text_completion" or a "chat.completion" object with the choices in order (their
// `index`), the usage of all of them, and the first choice's "epd" (with n > 1 each choice's too, under
// "epd": {"choices": [...]}).
std::string completion_body(const ResponseHead& head, std::span<const Choice> choices, const Usage& usage);
// One choice.
std::string completion_body(const ResponseHead& head, std::string_view text, FinishReason finish,
                            const Usage& usage, const Extras& extras);

// Server-Sent Events as OpenAI frames them: one "data: <json>" line and a blank line per event.
std::string sse_data(std::string_view json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// The events of one streamed answer of `choices` choices, each call returning bytes ready to write. Order:
// start() (chat: a role chunk per choice; nothing for completions), text() per delta of any choice, one
// finish_choice() per choice, then end(); or error() at any point. finish() is finish_choice(0) + end().
//
// With `logprobs`, each chunk's "logprobs" holds the entries of the tokens whose text it carries (chat:
// {"content": [...]}; completions: the four lists, text_offset counting on from the choice's earlier
// chunks), and a finish chunk those of tokens that had no text left to send (an end token's); else null.
class StreamRenderer {
 public:
  StreamRenderer(ResponseHead head, bool include_usage, uint32_t choices = 1, bool logprobs = false);

  // Chat: {"delta": {"role": "assistant", "content": ""}} per choice. text() and finish_choice() send them
  // first if they were not.
  std::string start();
  // One chunk with this text of choice `index`; nothing for an empty delta (OpenAI sends no empty chunks).
  std::string text(std::string_view delta, uint32_t index = 0, std::span<const TokenLogprob> logprobs = {});
  // Chat: one chunk with this thinking of choice `index`, {"delta": {"reasoning_content": ...}}, as
  // llama-server streams it; nothing for an empty delta.
  std::string reasoning(std::string_view delta, uint32_t index = 0);
  // Chat: one chunk per call of choice `index`, {"delta": {"tool_calls": [{"index", "id", "type", "function":
  // {"name", "arguments"}}]}}, the whole arguments in it.
  std::string tool_calls(std::span<const model::ToolCall> calls, uint32_t index = 0);
  // The chunk with choice `index`'s finish_reason and its "epd" (chat: {"delta": {}}, completions: "text":
  // "").
  std::string finish_choice(uint32_t index, FinishReason reason, const Extras& extras,
                            std::span<const TokenLogprob> logprobs = {});
  // With include_usage, a chunk with "choices": [] and the usage of every choice; then [DONE].
  std::string end(const Usage& usage);
  std::string finish(FinishReason reason, const Usage& usage, const Extras& extras);
  // A failure after the 200 and its headers went out: the error body as an event, then [DONE].
  std::string error(const HttpError& e) const;

 private:
  std::string role_if_not_sent();

  ResponseHead head_;
  bool include_usage_;
  uint32_t choices_;
  bool logprobs_;
  std::vector<size_t> text_offset_;  // completions: per choice, the text_offset of its next token
  bool started_ = false;
};

}  // namespace epd::http::openai
