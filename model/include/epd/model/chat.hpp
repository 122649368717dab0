#pragma once
// The chat template of the reference model: a conversation of system / user / assistant turns rendered as
// one text prompt (ChatML-like, byte for byte in docs/model.md), ending with the assistant's opening so the
// model answers. The model has no special tokens for it: the markers are plain bytes.
#include <span>
#include <string>

#include "epd/model/config.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

struct ChatTurn {
  std::string role;  // "system", "user" or "assistant"
  std::string text;
  bool image = false;  // the turn carried an image (user turns only; at most one in a conversation)
};

// "<|im_start|>ROLE\nTEXT<|im_end|>\n" per turn, then "<|im_start|>assistant\n". Images leave no mark in the
// text: the caller passes the one image to build_prompt, which puts its placeholders right after BOS.
// invalid_request for: no turns, another role, an image outside a user turn or a second image, a text that
// contains a marker ("<|im_start|>" / "<|im_end|>": it could forge turns), a prompt that cannot fit
// cfg.max_seq.
protocol::Result<std::string> render_chat(const ModelConfig& cfg, std::span<const ChatTurn> turns);

}  // namespace epd::model
