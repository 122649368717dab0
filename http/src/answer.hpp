#pragma once
// One generation answered on one wire: the neutral request (openai::Request, whatever route it came in on)
// becomes the router's GenerateRequest, and its tokens go back out as the route's bodies or events. What
// differs between OpenAI's Chat Completions and Completions, OpenAI's Responses and Anthropic's Messages is
// only the AnswerShape: how the text, thinking, calls and end of each choice are written.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "api_context.hpp"
#include "epd/http/openai_reply.hpp"
#include "epd/http/openai_request.hpp"

namespace epd::http {

// Writes one answer's events (a stream) or its whole body, in a wire's format. Calls come in this order:
// start(), then per choice any mix of reasoning() and text(), its tool_calls(), its finish_choice(); then
// end(). stream_error() at any point after start() ends the stream. Not thread-safe (the answer locks).
class AnswerShape {
 public:
  virtual ~AnswerShape() = default;
  // The route's name in the activity log and the metrics.
  virtual const char* route() const = 0;
  virtual std::string start() = 0;
  virtual std::string text(std::string_view delta, uint32_t choice,
                           std::span<const openai::TokenLogprob> logprobs) = 0;
  virtual std::string reasoning(std::string_view delta, uint32_t choice) = 0;
  virtual std::string tool_calls(std::span<const model::ToolCall> calls, uint32_t choice) = 0;
  // `stop_sequence`: the stop string that ended the choice (empty: none did).
  virtual std::string finish_choice(uint32_t choice, openai::FinishReason reason,
                                    std::string_view stop_sequence, const openai::Extras& extras,
                                    std::span<const openai::TokenLogprob> logprobs) = 0;
  virtual std::string end(const openai::Usage& usage) = 0;
  virtual std::string stream_error(const HttpError& e) = 0;
  // The whole answer, not streamed.
  virtual std::string body(std::span<const openai::Choice> choices, const openai::Usage& usage) = 0;
  // An error before anything was sent, in the wire's error shape.
  virtual std::string error_body(const HttpError& e) const = 0;
  // A stream's Content-Type.
  virtual std::string_view stream_type() const { return "text/event-stream"; }
};

// The request's generation: images decoded, the constraint and tool grammars made, the model named in it
// checked. `in` is consumed. An error is the reply to send.
struct PreparedGeneration {
  GenerateRequest request;
  // With tools for the reference model: its Hermes calls are read by epd (model/chat_tools.hpp).
  bool hermes_tools = false;
  bool parallel_tool_calls = true;  // else only an answer's first call is kept
  // A checkpoint's chat with tools, or whose template thinks: llama.cpp's parser of the answer
  // (reasoning_content, content, tool calls), and the special tokens whose text the answer keeps.
  std::shared_ptr<const model::ChatAnswerParser> parser{};
  std::vector<model::TokenId> preserved{};
};
std::optional<HttpError> prepare_generation(ApiContext& ctx, openai::Request& in, std::string request_id,
                                            PreparedGeneration& out);

// Starts the generation and answers the exchange in `shape` when it ends (or streams it). n choices, stop
// strings and stream as `in` says.
void start_answer(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex, std::unique_ptr<AnswerShape> shape,
                  const openai::Request& in, PreparedGeneration prepared);

// The neutral limits of a request parser, from the router's configuration.
openai::Limits request_limits(const ApiContext& ctx);

}  // namespace epd::http
