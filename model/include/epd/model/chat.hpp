#pragma once
// The chat template of the reference model: a conversation of system / user / assistant turns rendered as
// one text prompt (ChatML-like, byte for byte in docs/model.md), ending with the assistant's opening so the
// model answers. The model has no special tokens for it: the markers are plain bytes.
#include <span>
#include <string>
#include <vector>

#include "epd/model/chat_tools.hpp"
#include "epd/model/config.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// Where an image stands in a turn's text (llama.cpp's media marker): a model with an mmproj puts the image's
// rows there; the reference model, whose one image always goes first, ignores the marker.
inline constexpr std::string_view kImageMarker = "<__media__>";

struct ChatTurn {
  std::string role;                    // "system", "user", "assistant" or "tool" (a call's result, in `text`)
  std::string text;                    // with one kImageMarker per image of the turn, where it stood
  bool image = false;                  // the turn carried an image (user turns only)
  std::vector<ToolCall> tool_calls{};  // an assistant turn's calls (chat_tools.hpp)
  std::string tool_call_id{};          // a tool turn's: the call it answers (templates may write it)
};

// The turns with the tools and the calls written in as the Hermes format has them (chat_tools.hpp): the
// tools block in the first system turn (one made if there is none), each assistant turn's calls in its
// text, each run of tool turns one user turn of <tool_response> blocks. The result has plain turns only.
protocol::Result<std::vector<ChatTurn>> hermes_turns(std::span<const ChatTurn> turns,
                                                     std::span<const ChatTool> tools);
// Whether the turns need hermes_turns: tools, a call, or a tool turn.
bool has_tool_parts(std::span<const ChatTurn> turns, std::span<const ChatTool> tools);

// `text` without its image markers.
std::string without_image_markers(std::string_view text);
// How many image markers the turns' texts hold.
size_t count_image_markers(std::span<const ChatTurn> turns);

// "<|im_start|>ROLE\nTEXT<|im_end|>\n" per turn, then "<|im_start|>assistant\n". Images leave no mark in the
// text: the caller passes the one image to build_prompt, which puts its placeholders right after BOS.
// invalid_request for: no turns, another role, an image outside a user turn or a second image, a text that
// contains a marker ("<|im_start|>" / "<|im_end|>": it could forge turns), a prompt that cannot fit
// cfg.max_seq.
protocol::Result<std::string> render_chat(const ModelConfig& cfg, std::span<const ChatTurn> turns);

}  // namespace epd::model
