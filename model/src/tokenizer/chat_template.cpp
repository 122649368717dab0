#include "epd/model/chat_template.hpp"

namespace epd::model {
namespace {

protocol::Error invalid(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(detail));
}

// Jinja's `| trim` / Python's str.strip(): ASCII whitespace at both ends.
std::string trim(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

class Builder {
 public:
  void special(std::string_view s) { out_.push_back({true, std::string(s)}); }
  // Text, split at image markers into image segments.
  void text(std::string_view s) {
    for (size_t m; (m = s.find(kImageMarker)) != std::string_view::npos;
         s.remove_prefix(m + kImageMarker.size())) {
      plain(s.substr(0, m));
      out_.push_back({false, std::string(kImageMarker), true});
    }
    plain(s);
  }
  std::vector<ChatSegment> take() { return std::move(out_); }

 private:
  void plain(std::string_view s) {
    if (s.empty()) return;
    if (!out_.empty() && !out_.back().special && !out_.back().image)
      out_.back().text += s;
    else
      out_.push_back({false, std::string(s)});
  }
  std::vector<ChatSegment> out_;
};

protocol::Status check_turns(std::span<const ChatTurn> turns, bool tool_turns) {
  if (turns.empty()) return invalid("chat: no messages");
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatTurn& t = turns[i];
    if (!t.tool_calls.empty() && t.role != "assistant")
      return invalid("chat message " + std::to_string(i) + ": only assistant messages carry tool calls");
    if (t.role != "system" && t.role != "user" && t.role != "assistant" && !(tool_turns && t.role == "tool"))
      return invalid("chat message " + std::to_string(i) + ": role '" + t.role +
                     "' is not supported (system, user or assistant)");
    if ((t.image || t.text.find(kImageMarker) != std::string::npos) && t.role != "user")
      return invalid("chat message " + std::to_string(i) + ": only user messages may carry an image");
  }
  return {};
}

void chatml(Builder& b, std::span<const ChatTurn> turns) {
  for (const ChatTurn& t : turns) {
    b.special("<|im_start|>");
    b.text(t.role + "\n" + t.text);
    b.special("<|im_end|>");
    b.text("\n");
  }
  b.special("<|im_start|>");
  b.text("assistant\n");
}

void llama3(Builder& b, std::span<const ChatTurn> turns, std::string_view bos) {
  b.special(bos);
  for (const ChatTurn& t : turns) {
    b.special("<|start_header_id|>");
    b.text(t.role);
    b.special("<|end_header_id|>");
    b.text("\n\n" + trim(t.text));
    b.special("<|eot_id|>");
  }
  b.special("<|start_header_id|>");
  b.text("assistant");
  b.special("<|end_header_id|>");
  b.text("\n\n");
}

void header(Builder& b, std::string_view role) {
  b.special("<|start_header_id|>");
  b.text(role);
  b.special("<|end_header_id|>");
}

// Llama-3.1's layout with tools (its JSON tool calling): the date header in the system turn, the tools in
// the first user turn, calls as {"name", "parameters"}, results as ipython turns.
protocol::Status llama3_tools(Builder& b, std::span<const ChatTurn> turns, std::string_view bos,
                              std::span<const ChatTool> tools) {
  b.special(bos);
  size_t i = 0;
  std::string system;
  if (turns[0].role == "system") {
    system = trim(turns[0].text);
    i = 1;
  }
  header(b, "system");
  b.text(std::string("\n\n") + (tools.empty() ? "" : "Environment: ipython\n") +
         "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + system);
  b.special("<|eot_id|>");
  if (!tools.empty()) {
    if (i == turns.size() || turns[i].role != "user")
      return invalid(
          "chat: Llama-3 puts the tools in the first user message; the conversation must start "
          "with one (after an optional system message)");
    header(b, "user");
    b.text("\n\n" + llama3_tools_preamble(tools) + trim(turns[i].text));
    b.special("<|eot_id|>");
    ++i;
  }
  for (; i < turns.size(); ++i) {
    const ChatTurn& t = turns[i];
    if (t.role == "tool") {
      header(b, "ipython");
      b.text("\n\n" + llama3_tool_result_text(t.text));
    } else if (!t.tool_calls.empty()) {
      if (t.tool_calls.size() != 1)
        return invalid("chat message " + std::to_string(i) +
                       ": Llama-3 takes one tool call per assistant message");
      auto call = llama3_call_text(t.tool_calls[0]);
      if (!call) return call.error();
      header(b, "assistant");
      b.text("\n\n" + *call);
    } else {
      header(b, t.role);
      b.text("\n\n" + trim(t.text));
    }
    b.special("<|eot_id|>");
  }
  header(b, "assistant");
  b.text("\n\n");
  return {};
}

protocol::Status llama2(Builder& b, std::span<const ChatTurn> turns, std::string_view bos,
                        std::string_view eos) {
  std::string system;
  size_t first = 0;
  if (turns[0].role == "system") {
    system = turns[0].text;
    first = 1;
  }
  if (first == turns.size()) return invalid("chat: a Llama-2 conversation needs a user message");
  for (size_t i = first; i < turns.size(); ++i) {
    const ChatTurn& t = turns[i];
    const bool want_user = (i - first) % 2 == 0;
    if (t.role != (want_user ? "user" : "assistant"))
      return invalid(
          "chat message " + std::to_string(i) +
          ": Llama-2 conversations alternate user/assistant (after an optional first system message)");
    if (want_user) {
      std::string content = t.text;
      if (i == first && first == 1) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
      b.special(bos);
      b.text("[INST] " + trim(content) + " [/INST]");
    } else {
      b.text(" " + trim(t.text) + " ");
      b.special(eos);
    }
  }
  if (turns.back().role != "user")
    return invalid("chat: a Llama-2 conversation must end with a user message");
  return {};
}

}  // namespace

std::string_view chat_style_name(ChatStyle style) {
  switch (style) {
    case ChatStyle::chatml:
      return "chatml";
    case ChatStyle::llama2:
      return "llama2";
    case ChatStyle::llama3:
      return "llama3";
  }
  return "?";
}

protocol::Result<ChatStyle> pick_chat_style(std::string_view jinja, const Tokenizer& tok) {
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return ChatStyle::llama3;
  if (jinja.find("<|im_start|>") != std::string_view::npos) return ChatStyle::chatml;
  if (jinja.find("[INST]") != std::string_view::npos) return ChatStyle::llama2;
  if (jinja.empty() && tok.special_id("<|im_start|>") && tok.special_id("<|im_end|>"))
    return ChatStyle::chatml;
  return protocol::make_error(protocol::ErrorCode::config_error,
                              jinja.empty()
                                  ? "the checkpoint has no chat template and no ChatML tokens"
                                  : "the checkpoint's chat template is of no supported family "
                                    "(Llama-2 [INST], Llama-3 <|start_header_id|>, ChatML <|im_start|>)");
}

ToolFormat tool_format(ChatStyle style) {
  switch (style) {
    case ChatStyle::chatml:
      return ToolFormat::hermes;
    case ChatStyle::llama3:
      return ToolFormat::llama3;
    case ChatStyle::llama2:
      return ToolFormat::none;
  }
  return ToolFormat::none;
}

protocol::Result<std::vector<ChatSegment>> render_chat_segments(ChatStyle style,
                                                                std::span<const ChatTurn> turns,
                                                                std::string_view bos, std::string_view eos,
                                                                std::span<const ChatTool> tools) {
  const bool tooling = has_tool_parts(turns, tools);
  if (tooling && style == ChatStyle::llama2)
    return invalid(
        "chat: the Llama-2 chat template has no tool-call format (tools, tool calls and tool "
        "messages are refused)");
  std::vector<ChatTurn> rewritten;
  if (tooling && style == ChatStyle::chatml) {
    auto r = hermes_turns(turns, tools);
    if (!r) return r.error();
    rewritten = std::move(*r);
    turns = rewritten;
  }
  if (auto st = check_turns(turns, tooling && style == ChatStyle::llama3); !st) return st.error();
  Builder b;
  switch (style) {
    case ChatStyle::chatml:
      if (!bos.empty()) b.special(bos);
      chatml(b, turns);
      break;
    case ChatStyle::llama3:
      if (!tooling) {
        llama3(b, turns, bos);
      } else if (auto st = llama3_tools(b, turns, bos, tools); !st) {
        return st.error();
      }
      break;
    case ChatStyle::llama2:
      if (auto st = llama2(b, turns, bos, eos); !st) return st.error();
      break;
  }
  return b.take();
}

protocol::Result<std::string> render_chat_text(ChatStyle style, std::span<const ChatTurn> turns,
                                               std::string_view bos, std::string_view eos,
                                               std::span<const ChatTool> tools) {
  auto segs = render_chat_segments(style, turns, bos, eos, tools);
  if (!segs) return segs.error();
  std::string out;
  for (const ChatSegment& s : *segs) out += s.text;
  return out;
}

protocol::Result<std::vector<TokenId>> encode_chat(const Tokenizer& tok, ChatStyle style,
                                                   std::span<const ChatTurn> turns,
                                                   std::span<const std::vector<TokenId>> images,
                                                   std::span<const ChatTool> tools) {
  if (count_image_markers(turns) != images.size())
    return invalid(images.empty() ? "this model takes no images"
                                  : "chat: " + std::to_string(count_image_markers(turns)) +
                                        " image markers for " + std::to_string(images.size()) + " images");
  // ChatML checkpoints (Qwen, SmolLM) start without BOS unless their tokenizer says otherwise; the Llama
  // templates write it themselves.
  const bool want_bos = style != ChatStyle::chatml || tok.add_bos();
  std::string bos, eos;
  if (want_bos) {
    if (!tok.bos())
      return protocol::make_error(protocol::ErrorCode::config_error, "chat: the tokenizer has no BOS");
    bos = tok.piece(*tok.bos(), true);
  }
  if (style == ChatStyle::llama2) {
    if (!tok.eos())
      return protocol::make_error(protocol::ErrorCode::config_error, "chat: the tokenizer has no EOS");
    eos = tok.piece(*tok.eos(), true);
  }
  auto segs = render_chat_segments(style, turns, bos, eos, tools);
  if (!segs) return segs.error();
  std::vector<TokenId> out;
  size_t image = 0;
  for (const ChatSegment& s : *segs) {
    if (s.image) {
      out.insert(out.end(), images[image].begin(), images[image].end());
      ++image;
      continue;
    }
    if (s.special) {
      std::optional<TokenId> id = s.text == bos && tok.bos()   ? tok.bos()
                                  : s.text == eos && tok.eos() ? tok.eos()
                                                               : tok.special_id(s.text);
      if (!id)
        return protocol::make_error(protocol::ErrorCode::config_error,
                                    "chat: the tokenizer has no special token " + s.text + " for the " +
                                        std::string(chat_style_name(style)) + " template");
      out.push_back(*id);
      continue;
    }
    auto ids = tok.encode(s.text, false);
    if (!ids) return ids.error();
    out.insert(out.end(), ids->begin(), ids->end());
  }
  return out;
}

}  // namespace epd::model
