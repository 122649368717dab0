#pragma once
// Function calling in a chat (docs/model.md, "Tool calls"): the tools a client offers, the calls an assistant
// made, how both are written into a prompt in the model's tool format, and how an answer is read back into
// calls. Pure text work: the HTTP API checks the request's shape, the prompt codec renders, the router never
// sees a tool again once the prompt is made.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::model {

// The tool format epd writes and reads itself: the reference model's, Hermes (tools listed in the system
// turn, answers of <tool_call>{"name", "arguments"}</tool_call> blocks). A checkpoint's calls are written
// and read by llama.cpp's chat layer for its own template (chat_template.hpp).
enum class ToolFormat { none, hermes };

// One tool offered to the model.
struct ChatTool {
  std::string name{};
  std::string
      json{};  // the whole tool object as the client sent it, {"type": "function", ...}, keys in order
  std::string
      parameters{};  // the function's JSON schema as JSON text; {"type": "object"} when none was given
};

// One call of an assistant turn (a past one in a conversation, or one parsed from an answer).
struct ToolCall {
  std::string id{};
  std::string name{};
  std::string arguments{};  // a JSON object's text
};

// JSON as Python's json.dumps writes it (Jinja's `tojson` in the Hugging Face templates): ", " and ": "
// without indent, "," and newlines with it; keys in the order of the text. invalid_request if `text` is not
// JSON.
protocol::Result<std::string> python_json(std::string_view text, int indent = -1);

// Hermes: the system turn's text with the tools block appended (`system` empty: the block alone).
std::string hermes_system_text(std::string_view system, std::span<const ChatTool> tools);
// Hermes: an assistant turn's text with its calls (content first, then each <tool_call> block).
protocol::Result<std::string> hermes_assistant_text(std::string_view content,
                                                    std::span<const ToolCall> calls);
// Hermes: one tool result as its <tool_response> block (consecutive ones share one user turn, "\n" between).
std::string hermes_tool_response(std::string_view content);

// The calls in an answer, or nullopt when it holds none that parse (then it is plain text). Hermes: every
// <tool_call>...</tool_call> block must hold {"name": a tool's name, "arguments": an object}; `content` gets
// the text outside the blocks (trimmed). Calls get no id (the API gives them theirs).
struct ParsedCalls {
  std::vector<ToolCall> calls;
  std::string content;
};
std::optional<ParsedCalls> parse_tool_calls(ToolFormat format, std::string_view answer,
                                            std::span<const ChatTool> tools);

// An answer's text as it streams, split into what may go out as content now and what is held back because
// a call could start there (from "<tool_call>", or a prefix of it at the end). finish() parses what was
// held: calls, and the content left to send (all of the held text when it does not parse). The pushes' and
// finish's texts concatenated are the answer without its calls.
class ToolCallText {
 public:
  ToolCallText(ToolFormat format, std::vector<ChatTool> tools);
  std::string push(std::string_view text);
  struct End {
    std::string text;
    std::vector<ToolCall> calls;  // empty: the answer is plain text
  };
  End finish();

 private:
  ToolFormat format_;
  std::vector<ChatTool> tools_;
  std::string held_;
  bool holding_ = false;  // a call (may have) started: everything from held_ on waits for the end
};

}  // namespace epd::model
