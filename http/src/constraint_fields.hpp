#pragma once
// Constrained decoding's request fields (docs/http-api.md, "Structured output"): OpenAI's response_format
// ({"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", "strict"}}) and
// llama-server's "grammar" (GBNF) and "json_schema" (a schema), at most one of them. Only their shape is
// checked here (pure: no llama.cpp); the router converts a schema into GBNF and parses the grammar.
#include <nlohmann/json.hpp>
#include <optional>

#include "epd/http/http_request.hpp"
#include "epd/http/openai_request.hpp"

namespace epd::http::openai {

// Absent, null, an empty grammar and response_format {"type": "text"} are none; a wrong shape, a second
// constraint or text over kMaxConstraintBytes is a 400 naming the field.
std::optional<HttpError> parse_constraint_fields(const nlohmann::json& doc, Constraint& out);

}  // namespace epd::http::openai
