#pragma once
// The "messages" of a chat request: roles, string or part contents, inline images.
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "epd/http/http_request.hpp"
#include "epd/http/openai_request.hpp"

namespace epd::http::openai {

// Fills `out` from doc["messages"], or says what is wrong with it (param "messages[i]...").
std::optional<HttpError> parse_messages(const nlohmann::json& doc, const Limits& limits,
                                        std::vector<Message>& out);

}  // namespace epd::http::openai
