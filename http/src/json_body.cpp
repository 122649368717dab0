#include "json_body.hpp"

#include <string>

namespace epd::http {
namespace {

using nlohmann::json;

struct TooDeep {};

HttpError bad_request(std::string message) {
  return {400, "invalid_request", std::move(message)};
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the client needs only the rest.
// They quote the offending token, which can be long: keep the message readable.
std::string parse_error_message(const json::exception& e) {
  std::string_view what = e.what();
  if (auto pos = what.find("] "); pos != std::string_view::npos) what.remove_prefix(pos + 2);
  std::string msg = "invalid JSON: " + std::string(what.substr(0, 300));
  if (what.size() > 300) msg += "...";
  return msg;
}

}  // namespace

// The same rules as parse_generate_request's (http_request.cpp), which keeps its own copy for now.
std::variant<json, HttpError> parse_json_object(std::string_view body, int max_depth) {
  json doc;
  try {
    // The callback sees every nesting step before the value is built; throwing stops the parse early, so
    // "[[[[..." cannot make us allocate a deep tree.
    doc = json::parse(body, [&](int depth, json::parse_event_t, json&) {
      if (depth > max_depth) throw TooDeep{};
      return true;
    });
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number no double holds ("1e999"; found by fuzz/fuzz_http_request:
    // it escaped as a 500 "internal error").
    return bad_request(parse_error_message(e));
  } catch (const TooDeep&) {
    return bad_request("invalid JSON: nested deeper than " + std::to_string(max_depth) + " levels");
  }
  if (!doc.is_object()) {
    return bad_request(std::string("request body must be a JSON object, got ") + doc.type_name());
  }
  return doc;
}

}  // namespace epd::http
