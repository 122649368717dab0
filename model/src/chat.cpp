#include "epd/model/chat.hpp"

#include <string_view>

namespace epd::model {
namespace {

constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";

protocol::Error invalid(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(detail));
}

}  // namespace

std::string without_image_markers(std::string_view text) {
  std::string out;
  size_t at = 0;
  for (size_t m; (m = text.find(kImageMarker, at)) != std::string_view::npos; at = m + kImageMarker.size())
    out.append(text.substr(at, m - at));
  out.append(text.substr(at));
  return out;
}

size_t count_image_markers(std::span<const ChatTurn> turns) {
  size_t n = 0;
  for (const ChatTurn& t : turns)
    for (size_t m = t.text.find(kImageMarker); m != std::string::npos; m = t.text.find(kImageMarker, m + 1))
      ++n;
  return n;
}

bool has_tool_parts(std::span<const ChatTurn> turns, std::span<const ChatTool> tools) {
  if (!tools.empty()) return true;
  for (const ChatTurn& t : turns)
    if (t.role == "tool" || !t.tool_calls.empty()) return true;
  return false;
}

protocol::Result<std::vector<ChatTurn>> hermes_turns(std::span<const ChatTurn> turns,
                                                     std::span<const ChatTool> tools) {
  std::vector<ChatTurn> out;
  size_t i = 0;
  if (!tools.empty()) {  // as Qwen2.5's template: the first system turn takes the tools block
    const bool has_system = !turns.empty() && turns[0].role == "system";
    out.push_back({"system", hermes_system_text(has_system ? turns[0].text : "", tools)});
    i = has_system ? 1 : 0;
  }
  for (; i < turns.size(); ++i) {
    const ChatTurn& t = turns[i];
    if (t.role == "tool") {
      const bool joins = i > 0 && turns[i - 1].role == "tool";
      if (!joins) out.push_back({"user", ""});
      out.back().text += (joins ? "\n" : "") + hermes_tool_response(t.text);
      continue;
    }
    if (!t.tool_calls.empty()) {
      if (t.role != "assistant") return invalid("chat: only assistant messages carry tool calls");
      auto text = hermes_assistant_text(t.text, t.tool_calls);
      if (!text) return text.error();
      out.push_back({t.role, std::move(*text)});
      continue;
    }
    out.push_back({t.role, t.text, t.image});
  }
  return out;
}

protocol::Result<std::string> render_chat(const ModelConfig& cfg, std::span<const ChatTurn> turns) {
  if (turns.empty()) return invalid("chat: no messages");
  std::string out;
  bool image_seen = false;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatTurn& t = turns[i];
    const std::string where = "chat message " + std::to_string(i);
    if (t.role != "system" && t.role != "user" && t.role != "assistant")
      return invalid(where + ": role '" + t.role + "' is not supported (system, user or assistant)");
    if (t.image && t.role != "user") return invalid(where + ": only user messages may carry an image");
    if (t.image && image_seen) return invalid(where + ": the model takes at most one image per conversation");
    image_seen = image_seen || t.image;
    if (t.text.find(kStart) != std::string::npos || t.text.find(kEnd) != std::string::npos)
      return invalid(where + ": text contains a chat marker (" + std::string(kStart) + " or " +
                     std::string(kEnd) + ")");
    out.append(kStart)
        .append(t.role)
        .append("\n")
        .append(without_image_markers(t.text))
        .append(kEnd)
        .append("\n");
  }
  out.append(kStart).append("assistant\n");
  // BOS comes first (build_prompt), and at least one token must be generated.
  if (out.size() + 2 > cfg.max_seq)
    return invalid("chat prompt of " + std::to_string(out.size()) + " bytes does not fit the model's " +
                   std::to_string(cfg.max_seq) + "-token context");
  return out;
}

}  // namespace epd::model
