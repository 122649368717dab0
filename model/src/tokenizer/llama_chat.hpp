#pragma once
// epd's side of llama.cpp's chat layer (common/chat.h, the Jinja engine of common/jinja): a checkpoint's own
// chat template rendered as llama-server renders it, and a model's answer parsed back into content, reasoning
// and tool calls by the parser the template's analysis builds. Plain standard types only: llama.cpp's headers
// (and its JSON type) stay inside llama_chat.cpp, compiled with hidden symbols (model/CMakeLists.txt).
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace epd::model::llama_chat {

struct Call {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text
};

struct Message {
  std::string role;
  std::string content;
  std::string reasoning_content;
  std::string tool_call_id;
  std::vector<Call> calls;
};

// One piece of a rendered prompt. input: the text came from a message or a tool (llama.cpp's Jinja engine
// marks every string of the request and keeps the mark through the template's string operations).
struct Part {
  std::string text;
  bool input = false;
};

struct Answer {
  std::string content;
  std::string reasoning_content;
  std::vector<Call> calls;
};

// How one rendered conversation's answer is read back: llama.cpp's common_chat_parser_params (format, the
// PEG parser, the generation prompt the parser starts from), with llama-server's default reasoning format
// (deepseek: thinking goes to reasoning_content).
class Parser {
 public:
  virtual ~Parser() = default;
  virtual std::string format_name() const = 0;
  // The answer; nullopt and *error when the text does not match the format (a partial text never fails).
  virtual std::optional<Answer> parse(const std::string& text, bool partial, std::string* error) const = 0;
};

// A grammar trigger as llama.cpp's chat layer reports it (common_grammar_trigger without a token id).
struct Trigger {
  enum class Kind { word, pattern, pattern_full };
  Kind kind = Kind::word;
  std::string value;
};

// tool_choice as llama.cpp's chat layer takes it (a named function is "required" over that one tool).
enum class ToolChoice { automatic, required };

struct Rendered {
  std::string prompt;       // llama.cpp's common_chat_templates_apply(...).prompt
  std::vector<Part> parts;  // the same text with input marks; empty when they could not be had
  std::shared_ptr<const Parser> parser;
  std::vector<std::string> additional_stops;
  bool supports_thinking = false;
  // The tool-call grammar llama-server samples with (empty: none), lazy: applied from the first trigger on;
  // else the generation prompt is fed to it first (common_grammar_needs_prefill).
  std::string grammar;
  bool grammar_lazy = false;
  std::vector<Trigger> triggers;
  std::vector<std::string>
      preserved_tokens;  // special tokens whose text the answer keeps (and the parser reads)
  std::string generation_prompt;
};

class Templates {
 public:
  virtual ~Templates() = default;
  // Renders with add_generation_prompt; tools are OpenAI tool objects as JSON text. Throws std::exception
  // with llama.cpp's message when the template refuses the conversation (raise_exception) or cannot be used.
  virtual Rendered apply(const std::vector<Message>& messages, const std::vector<std::string>& tools,
                         ToolChoice choice, bool parallel_tool_calls, bool enable_thinking) const = 0;
  // llama.cpp's reading of the template's capabilities (supports_tools, supports_system_role, ...).
  virtual bool supports(const std::string& capability) const = 0;
};

// common_chat_templates_init(nullptr, source, bos, eos); throws std::exception when the template does not
// parse. An empty source is llama.cpp's ChatML default.
std::unique_ptr<Templates> make_templates(const std::string& source, const std::string& bos,
                                          const std::string& eos);

}  // namespace epd::model::llama_chat
