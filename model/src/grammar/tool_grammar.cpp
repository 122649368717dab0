// The grammar of forced tool calls (tool_choice "required" or a named function): one JSON schema for "a call
// of one of these tools", converted by llama.cpp's converter, wrapped in the format's call markers.
#include <string>

#include "epd/model/grammar.hpp"

namespace epd::model {

protocol::Result<std::string> tool_call_grammar(ToolFormat format, std::span<const ChatTool> tools,
                                                bool parallel) {
  auto invalid = [](std::string what) {
    return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(what));
  };
  if (format == ToolFormat::none) return invalid("the model's chat template has no tool-call format");
  if (tools.empty()) return invalid("no tools to call");
  // Names are [A-Za-z0-9_-] (checked by the API), so they need no escaping; parameters are JSON text.
  const std::string args_key = format == ToolFormat::llama3 ? "parameters" : "arguments";
  std::string schema = "{\"anyOf\": [";
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) schema += ", ";
    schema += "{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"" + tools[i].name + "\"}, \"" +
              args_key + "\": " + tools[i].parameters + "}, \"required\": [\"name\", \"" + args_key +
              "\"], \"additionalProperties\": false}";
  }
  schema += "]}";
  auto call = json_schema_grammar(schema);
  if (!call) return call.error();
  // The converter's start rule becomes the call's; the new root wraps it.
  std::string gbnf;
  size_t roots = 0;
  for (size_t at = 0; at < call->size();) {
    size_t end = call->find('\n', at);
    if (end == std::string::npos) end = call->size();
    std::string line = call->substr(at, end - at);
    if (line.rfind("root ::=", 0) == 0) {
      line = "tool-call-object ::=" + line.substr(8);
      ++roots;
    }
    gbnf += line + "\n";
    at = end + 1;
  }
  if (roots != 1) return invalid("the tools' schemas give no single start rule");
  if (format == ToolFormat::llama3) return gbnf + "root ::= tool-call-object\n";
  const std::string one = "\"<tool_call>\\n\" tool-call-object \"\\n</tool_call>\"";
  return gbnf + "root ::= " + one + (parallel ? " (\"\\n\" " + one + ")*" : "") + "\n";
}

}  // namespace epd::model
