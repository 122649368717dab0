#pragma once
// The body of Anthropic's POST /v1/messages (and /v1/messages/count_tokens) as the neutral request
// (wire_translation.hpp): system, messages with text, image (base64), tool_use and tool_result blocks,
// tools, tool_choice, stop_sequences, max_tokens, temperature, top_p, top_k, stream. Pure (no I/O);
// docs/http-api.md ("Anthropic's Messages API") lists what is taken, ignored and refused.
#include <string_view>
#include <variant>

#include "epd/http/openai_request.hpp"

namespace epd::http::anthropic {

// count_tokens: the same body without max_tokens (and nothing is generated).
std::variant<openai::Request, HttpError> parse_request(std::string_view body, const openai::Limits& limits,
                                                       bool count_tokens = false);

}  // namespace epd::http::anthropic
