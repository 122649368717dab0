#pragma once
// The body of OpenAI's POST /v1/responses as the neutral request (wire_translation.hpp): input as a string or
// as items (messages with input_text and input_image parts, earlier function calls and their outputs),
// instructions, tools (function), tool_choice, parallel_tool_calls, text.format, max_output_tokens, sampling,
// stream. Stateless: previous_response_id, store: true, background and conversation are refused (there is
// nothing kept to go back to). Pure; docs/http-api.md ("OpenAI's Responses API") lists the fields.
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "epd/http/openai_request.hpp"

namespace epd::http::responses {

struct Parsed {
  openai::Request request;
  // The request's settings as a Response object repeats them (instructions, max_output_tokens,
  // parallel_tool_calls, temperature, text, tool_choice, tools, top_p), each with its default when absent.
  nlohmann::ordered_json settings;
};

std::variant<Parsed, HttpError> parse_request(std::string_view body, const openai::Limits& limits);

}  // namespace epd::http::responses
