#pragma once
// Chat templates of real checkpoints. A checkpoint's own Jinja template (tokenizer_config.json chat_template,
// GGUF tokenizer.chat_template) is rendered by llama.cpp's template engine and chat layer (common/jinja,
// common/chat from the pinned source bundle), exactly as llama-server renders it: messages, system, tools,
// add_generation_prompt. The answer is read back by the parser llama.cpp builds for that template (content,
// reasoning_content, tool calls). The prompt is then tokenized with special-token parsing for the template's
// own text only: llama.cpp's engine marks the text that came from the request, and no control token is
// matched wholly inside it, so no message text can forge a turn (docs/model.md).
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/chat.hpp"
#include "epd/model/tokenizer.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

namespace llama_chat {
class Templates;
class Parser;
}  // namespace llama_chat

// One piece of a rendered conversation. literal: text from the request (messages, tools), in which no control
// token is parsed; image: stands for the next image's tokens (its text is kImageMarker).
struct ChatSegment {
  std::string text;
  bool literal = false;
  bool image = false;
};

// A model's answer read back by the template's parser.
struct ChatAnswer {
  std::string content;
  std::string reasoning_content;  // the thinking block (<think>...</think> and the like), as llama-server
  std::vector<ToolCall> tool_calls;
};

// How an answer to one rendered conversation is parsed (llama.cpp's common_chat_parse with the format the
// rendering reported).
class ChatAnswerParser {
 public:
  explicit ChatAnswerParser(std::shared_ptr<const llama_chat::Parser> parser);
  // partial: the answer so far (never an error). invalid_request when a whole answer does not match the
  // format (llama-server answers 500 there).
  protocol::Result<ChatAnswer> parse(std::string_view answer, bool partial = false) const;
  std::string format_name() const;

 private:
  std::shared_ptr<const llama_chat::Parser> parser_;
};

// An answer's text as it streams, split by the template's parser into reasoning_content and content, as
// llama-server streams them: each push() returns what each part grew by since the last one (a part the
// parse of the partial text would take back is held until it grows again), finish() the rest of the whole
// answer parsed as complete. An answer the format does not match is content.
class ReasoningSplit {
 public:
  explicit ReasoningSplit(std::shared_ptr<const ChatAnswerParser> parser);
  struct Delta {
    std::string reasoning, content;
  };
  Delta push(std::string_view text);
  Delta finish();

 private:
  Delta advance(bool partial);
  std::shared_ptr<const ChatAnswerParser> parser_;
  std::string raw_;                  // the answer's text so far
  std::string reasoning_, content_;  // what push() returned of each, concatenated
};

struct RenderedChat {
  std::string text;                   // the prompt as llama.cpp renders it
  std::vector<ChatSegment> segments;  // the same text, split where request text and images stand
  std::shared_ptr<const ChatAnswerParser> parser;
  bool supports_thinking = false;
};

// A checkpoint's chat template, parsed once (immutable, shared by threads).
class ChatTemplate {
 public:
  // config_error when the template does not parse. An empty template is llama.cpp's ChatML default (what
  // llama-server uses for a model without one). bos/eos: the tokenizer's spellings (bos_token, eos_token).
  static protocol::Result<std::shared_ptr<const ChatTemplate>> make(std::string_view jinja, std::string bos,
                                                                    std::string eos);
  static protocol::Result<std::shared_ptr<const ChatTemplate>> make(std::string_view jinja,
                                                                    const Tokenizer& tok);
  ~ChatTemplate();

  // The conversation, ending where the assistant's answer starts (add_generation_prompt). invalid_request for
  // no turns, a role other than system/user/assistant/tool, an image outside a user turn, and whatever the
  // template itself refuses (raise_exception: its message). `tok` (optional) checks request text when the
  // input marks cannot be had (docs/model.md).
  protocol::Result<RenderedChat> render(std::span<const ChatTurn> turns, std::span<const ChatTool> tools = {},
                                        bool enable_thinking = true, const Tokenizer* tok = nullptr) const;
  // llama.cpp's reading of the template: supports_tools, supports_tool_calls, supports_system_role, ...
  bool supports(std::string_view capability) const;
  const std::string& source() const { return source_; }
  // The tool format the HTTP layer forces and streams calls in (chat_tools.hpp): Hermes when the template
  // writes <tool_call> blocks, Llama-3's JSON calls for a Llama-3 header template with tools, else none.
  ToolFormat tool_format() const { return tool_format_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  std::unique_ptr<const llama_chat::Templates> impl_;
  ToolFormat tool_format_ = ToolFormat::none;
};

// The rendered text alone (specials spelled out), for tests and the reference model's tools.
protocol::Result<std::string> render_chat_text(std::string_view jinja, std::span<const ChatTurn> turns,
                                               std::string_view bos, std::string_view eos,
                                               std::span<const ChatTool> tools = {});

// Token ids of a rendered conversation, ready for prefill: [BOS if the tokenizer adds it and the template did
// not write it] + the text, control tokens parsed outside request text only. Image i's tokens are images[i]
// (its layout, epd/model/mmproj.hpp); invalid_request if the text holds another number of image markers.
protocol::Result<std::vector<TokenId>> encode_chat(const Tokenizer& tok, const RenderedChat& chat,
                                                   std::span<const std::vector<TokenId>> images = {});

}  // namespace epd::model
