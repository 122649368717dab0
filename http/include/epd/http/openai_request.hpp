#pragma once
// The bodies of OpenAI's POST /v1/completions and POST /v1/chat/completions, turned into one neutral Request
// or into the 4xx that explains what is wrong (with OpenAI's `param`). Pure (no I/O), so every rule is
// unit-testable; docs/http-api.md ("OpenAI-compatible API") lists the fields taken, ignored and refused.
//
// Unknown fields are ignored, as OpenAI-compatible servers do, so clients that send extras keep working.
// Known fields epd cannot honour (echo, best_of, ...) are refused, never ignored: a
// client that asked for them would otherwise get an answer that silently is not what it asked for.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "epd/http/http_request.hpp"
#include "epd/model/chat_tools.hpp"
#include "epd/model/sampling.hpp"

namespace epd::http::openai {

enum class Endpoint { completions, chat };

// A user message's image_url file (PNG/JPEG/PPM) or input_audio file (WAV/MP3), as sent.
struct MediaPart {
  std::vector<uint8_t> bytes;
  bool audio = false;
};

struct Message {
  std::string role;  // "system", "developer", "user", "assistant" or "tool", as given
  // The text parts joined with "\n" (a string content is one part), each image or clip as
  // model::kImageMarker where it stood, with no "\n" next to it (as llama-server joins them).
  std::string text;
  std::vector<MediaPart> media;               // from data: URIs and input_audio parts, in order (user only)
  std::vector<model::ToolCall> tool_calls{};  // an assistant's "tool_calls", arguments checked to be objects
  std::string tool_call_id{};                 // a tool message's
};

// Function calling (docs/http-api.md, "Tool calls"): the tools offered, and whether the model may, must or
// must not call them.
struct Tools {
  enum class Choice { none, automatic, required, named };
  std::vector<model::ChatTool> tools{};
  Choice choice = Choice::none;  // "auto" when tools are given without tool_choice
  std::string named{};           // Choice::named: the function
  bool parallel = true;          // parallel_tool_calls: several calls in one answer
};

inline constexpr size_t kMaxTools = 128;             // tools in a request, and calls in one assistant message
inline constexpr size_t kMaxToolsBytes = 64 * 1024;  // the tools' JSON text together

// GBNF and a schema's JSON text are each at most this long (model::kMaxGrammarBytes, the limit SUBMIT
// carries).
inline constexpr size_t kMaxConstraintBytes = 64 * 1024;

// Constrained decoding (docs/http-api.md, "Structured output"): the answer follows a grammar.
struct Constraint {
  enum class Kind { none, grammar, json_object, json_schema };
  Kind kind = Kind::none;
  std::string text{};   // grammar: the GBNF; json_schema: the schema's JSON text
  std::string param{};  // the field it came from ("grammar", "response_format.json_schema.schema", ...)
};

struct Request {
  Endpoint endpoint = Endpoint::completions;
  std::string model;              // as given; empty if absent
  std::string prompt;             // completions
  std::vector<Message> messages;  // chat
  uint32_t max_tokens = 0;  // max_tokens or max_completion_tokens; Limits::default_max_tokens if neither
  // Greedy unless "temperature" > 0 (OpenAI's default is 1; epd's is deterministic). A negative JSON seed
  // is taken as its 64-bit two's complement. `logprobs` and `top_logprobs` say what the answer reports.
  model::SamplingParams sampling;
  bool seed_given = false;
  std::vector<std::string> stop;  // 0..4 non-empty strings
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  uint32_t n = 1;              // choices, 1..kMaxChoices; choice i is drawn with seed + i
  Constraint constraint{};     // response_format, or llama-server's grammar / json_schema
  Tools tools{};               // chat
  bool ignore_eos = false;     // llama-server's: only max_tokens (or a stop string) ends the answer
};

inline constexpr uint32_t kMaxChoices = 8;

struct Limits {
  size_t max_prompt_bytes = 64 * 1024;        // the prompt, or all messages' text together
  size_t max_image_bytes = 16 * 1024 * 1024;  // one image as sent (PNG/JPEG/PPM file bytes, not pixels)
  size_t max_audio_bytes = 32 * 1024 * 1024;  // one audio file as sent (WAV/MP3 bytes, not samples)
  uint32_t default_max_tokens = 16;
  uint32_t max_tokens_limit = 1024;  // max_tokens must be in 1..max_tokens_limit
  int max_json_depth = 32;           // nesting deeper than this is refused before it is built
  size_t max_messages = 256;
  size_t max_stop_bytes = 256;  // each stop string
};

// Rejections are 400 "invalid_request" or 413 "oversized" (a prompt, the messages or an image over its
// limit), with `param` naming the field: "max_tokens", "stop", "messages[2].content[0].image_url.url".
std::variant<Request, HttpError> parse_request(Endpoint endpoint, std::string_view body,
                                               const Limits& limits);

}  // namespace epd::http::openai
