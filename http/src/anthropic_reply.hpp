#pragma once
// Anthropic's Messages answers: the message object, its Server-Sent Events (message_start,
// content_block_start / _delta / _stop per text, thinking and tool_use block, message_delta, message_stop)
// and Anthropic's error shape. docs/http-api.md shows them.
#include <memory>
#include <string>

#include "answer.hpp"

namespace epd::http::anthropic {

// {"type": "error", "error": {"type": "invalid_request_error" | "authentication_error" | ..., "message"}}.
std::string error_body(const HttpError& e);

// One answer (n = 1) as the message `id` of `model`.
std::unique_ptr<AnswerShape> make_shape(std::string id, std::string model);

// POST /v1/messages/count_tokens: {"input_tokens": n}.
std::string count_body(size_t input_tokens);

}  // namespace epd::http::anthropic
