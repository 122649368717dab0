#pragma once
// The sampling fields that /v1/generate and the OpenAI routes both take, with one set of types and ranges
// (docs/http-api.md): temperature in [0, 2], top_p in (0, 1], min_p in [0, 1], top_k 0..2^32-1 (0 or -1:
// off), seed any integer (a negative one is its 64-bit two's complement), logit_bias {"<id>": [-100, 100]}
// with at most kMaxLogitBias entries, presence_penalty and frequency_penalty in [-2, 2], repetition_penalty
// in (0, 2].
#include <nlohmann/json.hpp>
#include <optional>

#include "epd/http/http_request.hpp"
#include "epd/model/sampling.hpp"

namespace epd::http {

inline constexpr size_t kMaxLogitBias = 1024;

struct SamplingFields {
  model::SamplingParams params;  // greedy unless "temperature" > 0
  bool seed_given = false;
};

// Absent and null fields keep their defaults; a wrong one is a 400 whose `param` names it.
std::optional<HttpError> parse_sampling_fields(const nlohmann::json& doc, SamplingFields& out);

}  // namespace epd::http
