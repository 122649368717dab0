#pragma once
// JSON bodies of the HTTP API's replies (docs/http-api.md shows each). Text that is not valid UTF-8 (a
// byte-level model can stop mid-character) is emitted with U+FFFD replacements; token ids are exact.
#include <string>
#include <string_view>
#include <vector>

#include "epd/http/router_service.hpp"

namespace epd::http {

std::string generate_reply_json(const GenerateResponse& response);
std::string instances_json(const std::vector<InstanceView>& instances);
std::string stats_json(const RouterStats& stats);
// OpenAI's error shape (openai::error_body), which every epd route uses. Transitional: http_api.cpp knows
// the status but passes only the code, so the status class is taken from the code (the HTTP layer's codes
// and invalid_request/oversized are 4xx, everything else is 5xx). New code calls openai::error_body with the
// HttpError, status and param included.
std::string error_json(std::string_view code, std::string_view message);

}  // namespace epd::http
