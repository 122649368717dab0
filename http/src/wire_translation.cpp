#include "wire_translation.hpp"

#include "json_body.hpp"

namespace epd::http::wire {

using namespace openai::fields;

void FieldOrigins::add(std::string chat_path, std::string client_path) {
  origins_.emplace_back(std::move(chat_path), std::move(client_path));
}

HttpError FieldOrigins::to_client(HttpError e) const {
  const std::pair<std::string, std::string>* best = nullptr;
  for (const auto& o : origins_) {
    const std::string& from = o.first;
    if (!e.param.starts_with(from)) continue;
    // A whole path step: "messages[1]" starts "messages[1].content", not "messages[10]".
    if (e.param.size() > from.size() && e.param[from.size()] != '.' && e.param[from.size()] != '[') continue;
    if (!best || from.size() > best->first.size()) best = &o;
  }
  if (!best) return e;
  const std::string renamed = best->second + e.param.substr(best->first.size());
  // The message quotes the param, or the step of it that was renamed.
  for (const auto& [from, to] : {std::pair{e.param, renamed}, std::pair{best->first, best->second}}) {
    const std::string quoted = "\"" + from + "\"";
    const std::string replacement = "\"" + to + "\"";
    for (size_t at = 0; (at = e.message.find(quoted, at)) != std::string::npos; at += replacement.size())
      e.message.replace(at, quoted.size(), replacement);
  }
  e.param = renamed;
  return e;
}

std::variant<openai::Request, HttpError> parse_translated(const ojson& chat, const FieldOrigins& origins,
                                                          const openai::Limits& limits) {
  auto parsed = openai::parse_request(openai::Endpoint::chat, chat.dump(), limits);
  if (auto* e = std::get_if<HttpError>(&parsed)) return origins.to_client(std::move(*e));
  return parsed;
}

std::variant<Body, HttpError> read_body(std::string_view body, const openai::Limits& limits) {
  auto doc = parse_json_object(body, limits.max_json_depth);
  if (auto* e = std::get_if<HttpError>(&doc)) return std::move(*e);
  return Body{std::move(std::get<json>(doc)), ojson::parse(body, nullptr, false)};
}

Failure string_field(const json& object, const std::string& key, const std::string& at, const json*& out,
                     bool required) {
  out = field(object, key);
  const std::string param = at.empty() ? key : at + "." + key;
  if (!out) return required ? Failure(invalid(param, in_quotes(param) + " is required")) : std::nullopt;
  if (!out->is_string()) return wrong_type(param, "a string", *out);
  return std::nullopt;
}

}  // namespace epd::http::wire
