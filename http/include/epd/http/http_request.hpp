#pragma once
// Turns the body of POST /v1/generate into a GenerateRequest, or into the 4xx reply that explains what is
// wrong with it. Pure (no I/O), so every rejection is unit-testable without a server.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "epd/http/router_service.hpp"

namespace epd::http {

struct GenerateLimits {
  size_t max_prompt_bytes = 64 * 1024;
  size_t max_image_bytes = 16 * 1024 * 1024;  // decoded PPM
  size_t max_images = 16;                     // images and clips of one request
  size_t max_audio_bytes = 32 * 1024 * 1024;  // one audio file as sent
  uint32_t max_audio_seconds = 600;           // one clip, decoded (a longer one is refused before it is)
  uint32_t default_max_tokens = 16;
  uint32_t max_tokens_limit = 1024;  // max_tokens must be in 1..max_tokens_limit
  int max_json_depth = 32;           // nesting deeper than this is refused before it is built
};

// An HTTP-level error: the status, a machine-readable code and a message meant for a human.
struct HttpError {
  int status = 400;
  std::string code;  // "invalid_request", "oversized", "not_found", "method_not_allowed", ...
  std::string message;
  // The request field at fault ("max_tokens", "messages[1].content"), empty when none is. It is OpenAI's
  // error `param`; the default initializer keeps `HttpError{status, code, message}` warning-free.
  std::string param = {};
};

std::variant<GenerateRequest, HttpError> parse_generate_request(std::string_view body,
                                                                const GenerateLimits& limits);

}  // namespace epd::http
