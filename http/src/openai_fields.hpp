#pragma once
// What the OpenAI request parsers share: field lookup with OpenAI's null-is-absent rule, and the 400/413
// replies that name their param.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "epd/http/http_request.hpp"

namespace epd::http::openai::fields {

using nlohmann::json;
using Failure = std::optional<HttpError>;

inline HttpError invalid(const std::string& param, std::string message) {
  return {400, "invalid_request", std::move(message), param};
}

inline HttpError oversized(const std::string& param, std::string message) {
  return {413, "oversized", std::move(message), param};
}

inline std::string in_quotes(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

// Client-chosen strings echoed in messages are kept short.
inline std::string clip(std::string_view s) {
  return in_quotes(s.size() <= 40 ? s : s.substr(0, 40)) + (s.size() > 40 ? "..." : "");
}

inline HttpError wrong_type(const std::string& param, std::string_view expected, const json& got) {
  return invalid(param, in_quotes(param) + " must be " + std::string(expected) + ", got " + got.type_name());
}

inline HttpError unsupported(const std::string& param, std::string_view what) {
  return invalid(param, std::string(what) + " is not supported by epd");
}

// A present field, or nullptr: null means absent, as in OpenAI's API.
inline const json* field(const json& object, const std::string& key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace epd::http::openai::fields
