#pragma once
// The first step of every JSON request parser: the body as a JSON object, or the 400 that says why not.
#include <nlohmann/json.hpp>
#include <string_view>
#include <variant>

#include "epd/http/http_request.hpp"

namespace epd::http {

// Nesting deeper than `max_depth` is refused while parsing, before the deep part is built.
std::variant<nlohmann::json, HttpError> parse_json_object(std::string_view body, int max_depth);

}  // namespace epd::http
