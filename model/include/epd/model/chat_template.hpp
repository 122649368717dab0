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
#include "epd/protocol/messages.hpp"
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

// An answer's text as it streams, split by the template's parser into reasoning_content, content and tool
// calls, as llama-server streams them: each push() returns what reasoning and content grew by since the
// last one (a part the parse of the partial text would take back is held until it grows again; a call
// being written is no content), finish() the rest of the whole answer parsed as complete, and calls() its
// calls. An answer the format does not match is content.
class AnswerSplit {
 public:
  explicit AnswerSplit(std::shared_ptr<const ChatAnswerParser> parser);
  struct Delta {
    std::string reasoning, content;
  };
  Delta push(std::string_view text);
  Delta finish();
  // After finish(): the answer's tool calls (ids as the parser gave them; empty: none).
  std::vector<ToolCall>& calls() { return calls_; }

 private:
  Delta advance(bool partial);
  std::shared_ptr<const ChatAnswerParser> parser_;
  std::string raw_;                  // the answer's text so far
  std::string reasoning_, content_;  // what push() returned of each, concatenated
  std::vector<ToolCall> calls_;
};

// How an answer may call the tools (OpenAI's tool_choice and parallel_tool_calls; "none" shows no tools).
struct ToolUse {
  enum class Choice { automatic, required };
  Choice choice = Choice::automatic;
  std::string named{};  // with required: a call of this tool only (empty: any of them)
  bool parallel = true;
};

// A grammar trigger as llama.cpp's chat layer writes it: a word, or a regular expression over the answer's
// text (pattern_full: the whole text so far).
struct GrammarTrigger {
  enum class Kind { word, pattern, pattern_full };
  Kind kind = Kind::word;
  std::string value;
};

// The grammar llama-server samples a tool-calling answer with (common_chat_params), in text; grammar_spec()
// makes it what a room carries.
struct ChatGrammar {
  std::string gbnf;  // empty: none (e.g. "auto" for a template whose calls need no constraint)
  bool lazy = false;
  std::vector<GrammarTrigger> triggers;
  std::vector<std::string> preserved_tokens;  // special tokens whose text the answer keeps
  std::string generation_prompt;              // what a grammar that is not lazy starts with
};

struct RenderedChat {
  std::string text;                   // the prompt as llama.cpp renders it
  std::vector<ChatSegment> segments;  // the same text, split where request text and images stand
  std::shared_ptr<const ChatAnswerParser> parser;
  bool supports_thinking = false;
  ChatGrammar grammar;                        // with tools
  std::vector<std::string> additional_stops;  // stop strings the format adds (llama-server's)
};

// A rendered grammar as a room's grammar, converted as llama-server converts it for its sampler: a trigger
// word that is one preserved token triggers on that token, other words by their escaped text, full
// patterns anchored; a grammar that is not lazy is prefilled with the generation prompt's tokens (special
// tokens parsed, a first token that only adds a space dropped). invalid_request when a trigger word is one
// token that is not preserved (llama-server refuses it too).
protocol::Result<protocol::GrammarSpec> grammar_spec(const ChatGrammar& g, const Tokenizer& tok);
// The ids of the preserved tokens that are one token of `tok` (their text stays in the answer).
std::vector<TokenId> preserved_ids(const ChatGrammar& g, const Tokenizer& tok);

// What a rendering with tools sets on a generation: the room's grammar (grammar_spec), the tokens whose
// text stays in the answer and the stop strings the format adds. One conversion for every caller (the
// HTTP routes, epd-run).
struct ToolConstraint {
  protocol::GrammarSpec grammar;
  std::vector<TokenId> preserved;
  std::vector<std::string> stops;
};
protocol::Result<ToolConstraint> tool_constraint(const RenderedChat& r, const Tokenizer& tok);

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
  // With tools, `use` picks the grammar and the parser (a named tool: of that tool alone; the prompt lists
  // them all).
  protocol::Result<RenderedChat> render(std::span<const ChatTurn> turns, std::span<const ChatTool> tools = {},
                                        const ToolUse& use = {}, bool enable_thinking = true,
                                        const Tokenizer* tok = nullptr) const;
  // llama.cpp's reading of the template: supports_tools, supports_tool_calls, supports_system_role, ...
  bool supports(std::string_view capability) const;
  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  std::unique_ptr<const llama_chat::Templates> impl_;
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
