#include "epd/model/chat_tools.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

namespace epd::model {
namespace {

// Key order matters: the prompt must read as the template's `tojson` writes the client's objects.
using ojson = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";

protocol::Error invalid(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(detail));
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::optional<ojson> parse(std::string_view text) {
  ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

void write(const ojson& j, int indent, int depth, std::string& out) {
  const bool object = j.is_object();
  if (!object && !j.is_array()) {
    out += j.dump(-1, ' ', false, ojson::error_handler_t::replace);
    return;
  }
  if (j.empty()) {
    out += object ? "{}" : "[]";
    return;
  }
  const std::string inner = indent < 0 ? "" : "\n" + std::string(size_t(indent) * (depth + 1), ' ');
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += indent < 0 ? ", " : ",";
    first = false;
    out += inner;
    if (object) out += ojson(it.key()).dump(-1, ' ', false, ojson::error_handler_t::replace) + ": ";
    write(*it, indent, depth + 1, out);
  }
  if (indent >= 0) out += "\n" + std::string(size_t(indent) * depth, ' ');
  out += object ? '}' : ']';
}

std::string py(const ojson& j, int indent = -1) {
  std::string out;
  write(j, indent, 0, out);
  return out;
}

bool known(std::span<const ChatTool> tools, const std::string& name) {
  for (const ChatTool& t : tools)
    if (t.name == name) return true;
  return false;
}

// {"name": a tool, "arguments": an object}.
std::optional<ToolCall> call_of(std::string_view text, std::span<const ChatTool> tools) {
  auto j = parse(trim(text));
  if (!j || !j->is_object()) return std::nullopt;
  auto name = j->find("name");
  if (name == j->end() || !name->is_string() || !known(tools, name->get<std::string>())) return std::nullopt;
  auto args = j->find("arguments");
  if (args == j->end() || !args->is_object()) return std::nullopt;
  return ToolCall{{}, name->get<std::string>(), args->dump(-1, ' ', false, ojson::error_handler_t::replace)};
}

std::optional<ParsedCalls> hermes_calls(std::string_view answer, std::span<const ChatTool> tools) {
  ParsedCalls out;
  for (size_t open; (open = answer.find(kCallOpen)) != std::string_view::npos;) {
    out.content += answer.substr(0, open);
    answer.remove_prefix(open + kCallOpen.size());
    const size_t close = answer.find(kCallClose);
    if (close == std::string_view::npos) return std::nullopt;
    auto call = call_of(answer.substr(0, close), tools);
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    answer.remove_prefix(close + kCallClose.size());
  }
  out.content += answer;
  if (out.calls.empty()) return std::nullopt;
  return out;
}

}  // namespace

protocol::Result<std::string> python_json(std::string_view text, int indent) {
  auto j = parse(text);
  if (!j) return invalid("not JSON: " + std::string(text.substr(0, 40)));
  return py(*j, indent);
}

std::string hermes_system_text(std::string_view system, std::span<const ChatTool> tools) {
  std::string out(system);
  if (!out.empty()) out += "\n\n";
  out +=
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
      "with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const ChatTool& t : tools) {
    auto j = parse(t.json);
    out += "\n" + (j ? py(*j) : t.json);
  }
  out +=
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call>";
  return out;
}

protocol::Result<std::string> hermes_assistant_text(std::string_view content,
                                                    std::span<const ToolCall> calls) {
  std::string out(content);
  if (!out.empty() && !calls.empty()) out += "\n";
  for (size_t i = 0; i < calls.size(); ++i) {
    auto args = python_json(calls[i].arguments);
    if (!args) return args.error();
    if (i > 0) out += "\n";
    out += "<tool_call>\n{\"name\": \"" + calls[i].name + "\", \"arguments\": " + *args + "}\n</tool_call>";
  }
  return out;
}

std::string hermes_tool_response(std::string_view content) {
  return "<tool_response>\n" + std::string(content) + "\n</tool_response>";
}

std::optional<ParsedCalls> parse_tool_calls(ToolFormat format, std::string_view answer,
                                            std::span<const ChatTool> tools) {
  if (format == ToolFormat::hermes) return hermes_calls(answer, tools);
  return std::nullopt;
}

ToolCallText::ToolCallText(ToolFormat format, std::vector<ChatTool> tools)
    : format_(format), tools_(std::move(tools)) {}

std::string ToolCallText::push(std::string_view text) {
  if (format_ == ToolFormat::none) return std::string(text);
  held_ += text;
  if (holding_) return {};
  // Hermes: send up to the marker, or up to a suffix that could still become it.
  size_t keep = held_.find(kCallOpen);
  if (keep != std::string::npos) {
    holding_ = true;
  } else {
    keep = held_.size();
    for (size_t n = std::min(held_.size(), kCallOpen.size() - 1); n > 0; --n)
      if (std::string_view(held_).substr(held_.size() - n) == kCallOpen.substr(0, n)) {
        keep = held_.size() - n;
        break;
      }
  }
  std::string out = held_.substr(0, keep);
  held_.erase(0, keep);
  return out;
}

ToolCallText::End ToolCallText::finish() {
  End end;
  if (holding_)
    if (auto parsed = parse_tool_calls(format_, held_, tools_)) {
      end.text = std::move(parsed->content);
      end.calls = std::move(parsed->calls);
      held_.clear();
      return end;
    }
  end.text = std::exchange(held_, {});
  return end;
}

}  // namespace epd::model
