#include "tool_fields.hpp"

#include <set>
#include <string>

#include "openai_fields.hpp"

namespace epd::http::openai {
// Named, not anonymous: the file shares a unity source with the other request parsers.
namespace tool_fields {

using namespace fields;
using ojson = nlohmann::ordered_json;

// One {"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}.
Failure tool(const json& t, const ojson& ordered, const std::string& at, std::set<std::string>& names,
             model::ChatTool& out) {
  if (!t.is_object()) return wrong_type(at, "an object {\"type\": \"function\", \"function\": {...}}", t);
  const json* type = field(t, "type");
  if (!type || *type != "function")
    return invalid(at + ".type", in_quotes(at + ".type") + " must be \"function\"");
  const std::string fparam = at + ".function";
  const json* f = field(t, "function");
  if (!f) return invalid(fparam, in_quotes(fparam) + " is required");
  if (!f->is_object()) return wrong_type(fparam, "an object", *f);
  const json* name = field(*f, "name");
  if (!name) return invalid(fparam + ".name", in_quotes(fparam + ".name") + " is required");
  if (!name->is_string()) return wrong_type(fparam + ".name", "a string", *name);
  out.name = name->get<std::string>();
  if (!valid_function_name(out.name))
    return invalid(fparam + ".name", in_quotes(fparam + ".name") + " is " + clip(out.name) +
                                         "; a name is 1 to 64 of a-z, A-Z, 0-9, _ and -");
  if (!names.insert(out.name).second)
    return invalid(fparam + ".name", "two tools are named " + in_quotes(out.name));
  if (const json* d = field(*f, "description"); d && !d->is_string())
    return wrong_type(fparam + ".description", "a string", *d);
  if (const json* s = field(*f, "strict"); s && !s->is_boolean())
    return wrong_type(fparam + ".strict", "a boolean", *s);
  out.parameters = "{\"type\": \"object\"}";
  if (const json* p = field(*f, "parameters")) {
    if (!p->is_object()) return wrong_type(fparam + ".parameters", "an object (a JSON schema)", *p);
    out.parameters = ordered["function"]["parameters"].dump();
  }
  out.json = ordered.dump();
  return {};
}

Failure tools(const json& doc, std::string_view body, Tools& out) {
  const json* v = field(doc, "tools");
  if (!v) return {};
  if (!v->is_array()) return wrong_type("tools", "an array of tools", *v);
  if (v->size() > kMaxTools)
    return invalid("tools", "\"tools\" holds " + std::to_string(v->size()) + " tools; the limit is " +
                                std::to_string(kMaxTools));
  if (v->empty()) return {};
  // The body parsed once already, within the depth limit; again with its keys in order.
  const ojson ordered = ojson::parse(body, nullptr, false)["tools"];
  if (!ordered.is_array() || ordered.size() != v->size()) return invalid("tools", "\"tools\" cannot be read");
  if (const size_t bytes = ordered.dump().size(); bytes > kMaxToolsBytes)
    return invalid("tools", "\"tools\" is " + std::to_string(bytes) + " bytes of JSON; the limit is " +
                                std::to_string(kMaxToolsBytes));
  std::set<std::string> names;
  for (size_t i = 0; i < v->size(); ++i) {
    model::ChatTool t;
    if (auto e = tool((*v)[i], ordered[i], "tools[" + std::to_string(i) + "]", names, t)) return e;
    out.tools.push_back(std::move(t));
  }
  out.choice = Tools::Choice::automatic;
  return {};
}

Failure choice(const json& doc, Tools& out) {
  const json* v = field(doc, "tool_choice");
  if (!v) return {};
  const char* shape =
      "\"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
  if (v->is_string()) {
    if (*v == "none") {
      out.choice = Tools::Choice::none;
      return {};
    }
    if (*v == "auto") return {};  // with tools: the default; without: nothing to call
    if (*v != "required")
      return invalid("tool_choice",
                     "\"tool_choice\" is " + clip(v->get<std::string>()) + "; it must be " + shape);
    if (out.tools.empty()) return invalid("tool_choice", "\"tool_choice\": \"required\" needs \"tools\"");
    out.choice = Tools::Choice::required;
    return {};
  }
  if (!v->is_object()) return wrong_type("tool_choice", shape, *v);
  const json* type = field(*v, "type");
  if (!type || *type != "function")
    return invalid("tool_choice.type", "\"tool_choice.type\" must be \"function\"");
  const json* f = field(*v, "function");
  if (!f || !f->is_object())
    return invalid("tool_choice.function", "\"tool_choice.function\" must be an object");
  const json* name = field(*f, "name");
  if (!name || !name->is_string())
    return invalid("tool_choice.function.name", "\"tool_choice.function.name\" must be a string");
  for (const model::ChatTool& t : out.tools)
    if (t.name == *name) {
      out.choice = Tools::Choice::named;
      out.named = t.name;
      return {};
    }
  return invalid("tool_choice.function.name",
                 "\"tool_choice\" names " + clip(name->get<std::string>()) + ", which is not in \"tools\"");
}

// OpenAI's deprecated names: refused unless harmless, pointing at their replacements.
Failure legacy(const json& doc) {
  if (const json* v = field(doc, "functions")) {
    if (!v->is_array()) return wrong_type("functions", "an array", *v);
    if (!v->empty()) return invalid("functions", "\"functions\" is not supported by epd; send \"tools\"");
  }
  if (const json* v = field(doc, "function_call"))
    if (!(v->is_string() && (*v == "none" || *v == "auto")))
      return invalid("function_call", "\"function_call\" is not supported by epd; send \"tool_choice\"");
  return {};
}

}  // namespace tool_fields

bool valid_function_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

std::optional<HttpError> parse_tool_fields(const nlohmann::json& doc, std::string_view body, Tools& out) {
  using namespace tool_fields;
  out = {};
  if (auto e = legacy(doc)) return e;
  if (auto e = tools(doc, body, out)) return e;
  if (auto e = choice(doc, out)) return e;
  if (const json* v = field(doc, "parallel_tool_calls")) {
    if (!v->is_boolean()) return wrong_type("parallel_tool_calls", "a boolean", *v);
    out.parallel = v->get<bool>();
  }
  return {};
}

}  // namespace epd::http::openai
