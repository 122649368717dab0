#pragma once
// Function calling's request fields (docs/http-api.md, "Tool calls"): "tools", "tool_choice",
// "parallel_tool_calls", and the legacy "functions" / "function_call" (refused: send tools). Only their
// shape is checked here (pure); the route renders and constrains with the model's tool format.
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "epd/http/http_request.hpp"
#include "epd/http/openai_request.hpp"

namespace epd::http::openai {

// `body` is re-read with its keys in order for the tools' JSON (the prompt shows them as the client wrote
// them). A malformed field is a 400 naming it; so are more than kMaxTools tools or kMaxToolsBytes of them.
std::optional<HttpError> parse_tool_fields(const nlohmann::json& doc, std::string_view body, Tools& out);

// A function name: [A-Za-z0-9_-]{1,64}, as OpenAI's.
bool valid_function_name(std::string_view name);

}  // namespace epd::http::openai
