// A JSON schema as GBNF, by llama.cpp's json_schema_to_grammar (libllama-common, prebuilt in
// node-llama-cpp's package with libllama: docs/model.md, "Grammars").
#include <json-schema-to-grammar.h>
#include <json.h>

#include <exception>
#include <string>

#include "epd/model/grammar.hpp"

namespace epd::model {

protocol::Result<std::string> json_schema_grammar(std::string_view schema_json) {
  using protocol::ErrorCode;
  auto invalid = [](std::string what) {
    return protocol::make_error(ErrorCode::invalid_request, "JSON schema: " + std::move(what));
  };
  if (schema_json.size() > kMaxGrammarBytes)
    return invalid("the schema is " + std::to_string(schema_json.size()) + " bytes; the limit is " +
                   std::to_string(kMaxGrammarBytes));
  std::string gbnf;
  try {
    const common_json schema = common_json::parse(std::string(schema_json));
    if (!schema.is_object() && !schema.is_boolean()) return invalid("the schema must be an object");
    gbnf = json_schema_to_grammar(schema, /*force_gbnf=*/true);
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (what.size() > 300) what = what.substr(0, 300) + "...";
    return invalid(what.empty() ? "the schema cannot be converted" : what);
  } catch (...) {
    return invalid("the schema cannot be converted");
  }
  if (gbnf.size() > kMaxGrammarBytes)
    return invalid("its grammar is " + std::to_string(gbnf.size()) + " bytes; the limit is " +
                   std::to_string(kMaxGrammarBytes));
  return gbnf;
}

}  // namespace epd::model
