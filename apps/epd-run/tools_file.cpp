#include "tools_file.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace epd::run {
namespace {

using ojson = nlohmann::ordered_json;

protocol::Error bad(const std::string& what) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, "--tools: " + what);
}

}  // namespace

protocol::Result<std::vector<model::ChatTool>> read_tools_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return bad("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  const ojson tools = ojson::parse(text.str(), nullptr, false);
  if (!tools.is_array() || tools.empty()) return bad("the file must hold a non-empty JSON array of tools");
  std::vector<model::ChatTool> out;
  for (const auto& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string())
      return bad("each tool is {\"type\": \"function\", \"function\": {\"name\", ...}}");
    const ojson& f = t["function"];
    const bool has_params = f.contains("parameters") && f["parameters"].is_object();
    out.push_back({f["name"].get<std::string>(), t.dump(),
                   has_params ? f["parameters"].dump() : "{\"type\": \"object\"}"});
  }
  return out;
}

std::string with_tool_calls(const std::string& result_json, model::ToolFormat format,
                            const std::vector<model::ChatTool>& tools, const std::string& text,
                            bool parallel) {
  model::ToolCallText split(format, tools);
  std::string content = split.push(text);
  auto end = split.finish();
  if (end.calls.empty()) return result_json;
  if (!parallel) end.calls.resize(1);
  ojson out = ojson::parse(result_json);
  ojson calls = ojson::array();
  for (const auto& c : end.calls) calls.push_back({{"name", c.name}, {"arguments", c.arguments}});
  out["tool_calls"] = std::move(calls);
  out["content"] = content + end.text;
  return out.dump();
}

std::string with_parsed_calls(const std::string& result_json, const model::ChatAnswerParser& parser,
                              const std::string& text, bool parallel) {
  auto answer = parser.parse(text);
  if (!answer || answer->tool_calls.empty()) return result_json;
  if (!parallel) answer->tool_calls.resize(1);
  ojson out = ojson::parse(result_json);
  ojson calls = ojson::array();
  for (const auto& c : answer->tool_calls) calls.push_back({{"name", c.name}, {"arguments", c.arguments}});
  out["tool_calls"] = std::move(calls);
  out["content"] = answer->content;
  return out.dump();
}

}  // namespace epd::run
