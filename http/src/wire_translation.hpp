#pragma once
// The request parsers of OpenAI's Responses and Anthropic's Messages write the client's body as the Chat
// Completions body it means, and the one chat parser (openai_request.hpp) makes the neutral request from it:
// every rule of a message, image, tool, grammar and sampling field is checked in one place, whatever the
// wire. Errors the chat parser finds are renamed back to the field the client sent.
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "epd/http/openai_request.hpp"
#include "openai_fields.hpp"

namespace epd::http::wire {

using ojson = nlohmann::ordered_json;
using openai::fields::Failure;
using openai::fields::json;

// Where a field of the chat body came from in the client's: "messages[3].content[1]" from
// "messages[1].content[2]", "stop" from "stop_sequences".
class FieldOrigins {
 public:
  void add(std::string chat_path, std::string client_path);
  // `e` with its param (and that name where its message quotes it) as the client wrote it: the longest
  // chat path that starts the param is replaced.
  HttpError to_client(HttpError e) const;

 private:
  std::vector<std::pair<std::string, std::string>> origins_;
};

// The chat body parsed into the neutral request (Endpoint::chat), its errors in the client's names.
std::variant<openai::Request, HttpError> parse_translated(const ojson& chat, const FieldOrigins& origins,
                                                          const openai::Limits& limits);

// "at[i]": the path of an array's element.
inline std::string at_index(const std::string& at, size_t i) {
  return at + "[" + std::to_string(i) + "]";
}

// A body read twice: checked and within the depth limit (doc), and with its keys in order (ordered: what a
// prompt shows of tools and schemas keeps the client's order).
struct Body {
  json doc;
  ojson ordered;
};
std::variant<Body, HttpError> read_body(std::string_view body, const openai::Limits& limits);

// A string field, required or not: nullptr when absent; a failure when not a string.
Failure string_field(const json& object, const std::string& key, const std::string& at, const json*& out,
                     bool required = false);

}  // namespace epd::http::wire
