#include "constraint_fields.hpp"

#include <string>

#include "openai_fields.hpp"

namespace epd::http::openai {
// Named, not anonymous: the file shares a unity source with the other request parsers.
namespace constraint_fields {

using namespace fields;

Failure too_long(const std::string& param, size_t size) {
  return invalid(param, in_quotes(param) + " is " + std::to_string(size) + " bytes; the limit is " +
                            std::to_string(kMaxConstraintBytes) + " bytes");
}

// A schema: an object (or true/false, which JSON Schema allows), kept as JSON text.
Failure schema(const json& v, const std::string& param, Constraint& out) {
  if (!v.is_object() && !v.is_boolean()) return wrong_type(param, "an object (a JSON schema)", v);
  std::string text = v.dump();
  if (text.size() > kMaxConstraintBytes) return too_long(param, text.size());
  out = {Constraint::Kind::json_schema, std::move(text), param};
  return {};
}

Failure response_format(const json& v, Constraint& out) {
  if (!v.is_object()) return wrong_type("response_format", "an object", v);
  const json* type = field(v, "type");
  if (!type || !type->is_string())
    return invalid("response_format.type", "\"response_format.type\" is required (a string)");
  if (*type == "text") return {};
  if (*type == "json_object") {
    // llama-server's extension: a schema next to the type.
    if (const json* s = field(v, "schema")) return schema(*s, "response_format.schema", out);
    out = {Constraint::Kind::json_object, {}, "response_format"};
    return {};
  }
  if (*type != "json_schema")
    return unsupported("response_format.type",
                       "\"response_format\" of type " + clip(type->get<std::string>()));
  const json* js = field(v, "json_schema");
  if (!js) return invalid("response_format.json_schema", "\"response_format.json_schema\" is required");
  if (!js->is_object()) return wrong_type("response_format.json_schema", "an object", *js);
  if (const json* name = field(*js, "name"); name && !name->is_string())
    return wrong_type("response_format.json_schema.name", "a string", *name);
  if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean())
    return wrong_type("response_format.json_schema.strict", "a boolean", *strict);
  const json* s = field(*js, "schema");
  if (!s)
    return invalid("response_format.json_schema.schema",
                   "\"response_format.json_schema.schema\" is required");
  return schema(*s, "response_format.json_schema.schema", out);
}

}  // namespace constraint_fields

std::optional<HttpError> parse_constraint_fields(const nlohmann::json& doc, Constraint& out) {
  using namespace constraint_fields;
  out = {};
  std::string first;  // the field that set the constraint
  auto set = [&](Constraint c, const std::string& name) -> Failure {
    if (c.kind == Constraint::Kind::none) return {};
    if (out.kind != Constraint::Kind::none)
      return invalid(name, in_quotes(first) + " and " + in_quotes(name) +
                               " both constrain the answer; send one of them");
    out = std::move(c);
    first = name;
    return {};
  };
  if (const json* v = field(doc, "grammar")) {
    if (!v->is_string()) return wrong_type("grammar", "a string (GBNF)", *v);
    const auto& g = v->get_ref<const std::string&>();
    if (g.size() > kMaxConstraintBytes) return too_long("grammar", g.size());
    if (!g.empty())
      if (auto e = set({Constraint::Kind::grammar, g, "grammar"}, "grammar")) return e;
  }
  if (const json* v = field(doc, "json_schema")) {
    Constraint c;
    if (auto e = schema(*v, "json_schema", c)) return e;
    if (auto e = set(std::move(c), "json_schema")) return e;
  }
  if (const json* v = field(doc, "response_format")) {
    Constraint c;
    if (auto e = response_format(*v, c)) return e;
    if (auto e = set(std::move(c), "response_format")) return e;
  }
  return {};
}

}  // namespace epd::http::openai
