#pragma once
// Chat templates of real checkpoints: the Llama-2 ([INST]), Llama-3 (<|start_header_id|>) and ChatML
// (<|im_start|>) families. The checkpoint's Jinja template is not executed: its family is recognised by
// its markers and rendered by the fixed code here (docs/model.md lists what that simplifies). A prompt is
// built as token ids, markers as the tokenizer's special tokens and message texts encoded without
// special-token parsing, so no message text can forge a turn.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/chat.hpp"
#include "epd/model/tokenizer.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

enum class ChatStyle { chatml, llama2, llama3 };

std::string_view chat_style_name(ChatStyle style);
// The tool-call format a family was trained on (chat_tools.hpp): ChatML Hermes, Llama-3 its JSON calls,
// Llama-2 none.
ToolFormat tool_format(ChatStyle style);

// The family of a Jinja chat template, by its markers (Llama-3's header, ChatML's im_start, Llama-2's
// [INST]). An empty template means the checkpoint has none: ChatML when the tokenizer has <|im_start|> and
// <|im_end|> as special tokens. Anything else is an error naming the supported families.
protocol::Result<ChatStyle> pick_chat_style(std::string_view jinja_template, const Tokenizer& tok);

// One piece of a rendered conversation: a special token's spelling or plain text.
// An image segment stands for the next image's tokens (its text is kImageMarker).
struct ChatSegment {
  bool special = false;
  std::string text;
  bool image = false;
};

// The conversation in the style's layout, ending where the assistant's answer starts; the turns' image
// markers become image segments. invalid_request for no turns, an unknown role, and, for Llama-2, turns that
// do not alternate user/assistant after an optional first system turn or that end with the assistant.
// With tools, calls or tool turns (chat_tools.hpp): ChatML in the Hermes format (hermes_turns), Llama-3 as
// Llama-3.1's JSON tool calling, Llama-2 refused (no format).
protocol::Result<std::vector<ChatSegment>> render_chat_segments(ChatStyle style,
                                                                std::span<const ChatTurn> turns,
                                                                std::string_view bos, std::string_view eos,
                                                                std::span<const ChatTool> tools = {});

// The same as one string (specials spelled out), as a Jinja rendering of the original template gives it.
protocol::Result<std::string> render_chat_text(ChatStyle style, std::span<const ChatTurn> turns,
                                               std::string_view bos, std::string_view eos,
                                               std::span<const ChatTool> tools = {});

// Token ids of the conversation, ready for prefill. BOS/EOS spellings come from the tokenizer. Image i's
// tokens are images[i] (its layout, epd/model/mmproj.hpp); invalid_request if the turns hold another
// number of image markers, or an image outside a user turn.
protocol::Result<std::vector<TokenId>> encode_chat(const Tokenizer& tok, ChatStyle style,
                                                   std::span<const ChatTurn> turns,
                                                   std::span<const std::vector<TokenId>> images = {},
                                                   std::span<const ChatTool> tools = {});

}  // namespace epd::model
