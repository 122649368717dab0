// The router's request bodies (http/src/): OpenAI's /v1/completions and /v1/chat/completions
// (openai_request.cpp, openai_messages.cpp, json_body.cpp), images as data: URIs (data_uri.cpp, base64.cpp),
// and the native /v1/generate (http_request.cpp). The first byte picks the parser, the rest is the body.
// Small limits, so the fuzzer reaches every limit. Invariants: a parsed request respects each limit it is
// parsed under; a refusal is 400 invalid_request or 413 oversized, with a message.
#include <cmath>

#include "epd/http/data_uri.hpp"
#include "epd/http/http_request.hpp"
#include "epd/http/openai_request.hpp"
#include "epd/model/image_codec.hpp"
#include "fuzz_check.hpp"

using namespace epd::http;
using epd::fuzz::FuzzInput;

namespace {

void check_refusal(const HttpError& e) {
  FUZZ_CHECK((e.status == 400 && e.code == "invalid_request") || (e.status == 413 && e.code == "oversized"));
  FUZZ_CHECK(!e.message.empty());
}

openai::Limits small_openai_limits() {
  openai::Limits l;
  l.max_prompt_bytes = 256;
  l.max_image_bytes = 512;
  l.max_tokens_limit = 64;
  l.max_json_depth = 8;
  l.max_messages = 8;
  l.max_stop_bytes = 16;
  return l;
}

// What both parsers promise the sampler (model::validate's ranges).
void check_sampling(const epd::model::SamplingParams& p) {
  FUZZ_CHECK(std::isfinite(p.temperature) && p.temperature >= 0 && p.temperature <= 2);
  FUZZ_CHECK(std::isfinite(p.top_p) && p.top_p > 0 && p.top_p <= 1);
}

void openai_body(openai::Endpoint endpoint, std::string_view body) {
  static const openai::Limits limits = small_openai_limits();
  auto parsed = openai::parse_request(endpoint, body, limits);
  if (auto* e = std::get_if<HttpError>(&parsed)) return check_refusal(*e);
  const auto& r = std::get<openai::Request>(parsed);
  FUZZ_CHECK(r.endpoint == endpoint);
  FUZZ_CHECK(r.max_tokens >= 1 && r.max_tokens <= limits.max_tokens_limit);
  check_sampling(r.sampling);
  FUZZ_CHECK(r.stop.size() <= 4);
  for (const auto& s : r.stop) FUZZ_CHECK(!s.empty() && s.size() <= limits.max_stop_bytes);
  if (endpoint == openai::Endpoint::completions) {
    FUZZ_CHECK(r.messages.empty());
    FUZZ_CHECK(r.prompt.size() <= limits.max_prompt_bytes);
    return;
  }
  FUZZ_CHECK(!r.messages.empty() && r.messages.size() <= limits.max_messages);
  size_t text = 0;
  for (const auto& m : r.messages) {
    text += m.text.size();
    FUZZ_CHECK(m.media.empty() || m.role == "user");
    for (const auto& part : m.media) {
      FUZZ_CHECK(!part.bytes.empty() &&
                 part.bytes.size() <= (part.audio ? limits.max_audio_bytes : limits.max_image_bytes));
      if (!part.audio)
        FUZZ_CHECK(epd::model::sniff_image_format(part.bytes) != epd::model::ImageFormat::unknown);
    }
  }
  FUZZ_CHECK(text <= limits.max_prompt_bytes);
}

void generate_body(std::string_view body) {
  GenerateLimits limits;
  limits.max_prompt_bytes = 256;
  limits.max_image_bytes = 512;
  limits.max_tokens_limit = 64;
  limits.max_json_depth = 8;
  auto parsed = parse_generate_request(body, limits);
  if (auto* e = std::get_if<HttpError>(&parsed)) return check_refusal(*e);
  const auto& r = std::get<GenerateRequest>(parsed);
  // Text or token ids, never both and never neither.
  FUZZ_CHECK(r.prompt.empty() != r.prompt_tokens.empty());
  FUZZ_CHECK(r.prompt.size() <= limits.max_prompt_bytes &&
             r.prompt_tokens.size() <= limits.max_prompt_bytes / 4);
  FUZZ_CHECK(r.max_tokens >= 1 && r.max_tokens <= limits.max_tokens_limit);
  check_sampling(r.sampling);
  FUZZ_CHECK(r.media.size() <= limits.max_images);
  for (const auto& image : r.media) FUZZ_CHECK(image.size() <= limits.max_image_bytes);
}

void data_uri(std::string_view uri) {
  constexpr size_t kMax = 512;
  auto decoded = decode_image_data_uri(uri, kMax);
  if (auto* e = std::get_if<HttpError>(&decoded)) return check_refusal(*e);
  const auto& bytes = std::get<std::vector<uint8_t>>(decoded);
  FUZZ_CHECK(!bytes.empty() && bytes.size() <= kMax);
  FUZZ_CHECK(epd::model::sniff_image_format(bytes) != epd::model::ImageFormat::unknown);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t which = in.take<uint8_t>() % 4;
  const std::string_view body = in.rest_text();
  switch (which) {
    case 0:
      openai_body(openai::Endpoint::completions, body);
      break;
    case 1:
      openai_body(openai::Endpoint::chat, body);
      break;
    case 2:
      generate_body(body);
      break;
    default:
      data_uri(body);
      break;
  }
  return 0;
}
