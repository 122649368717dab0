#include "epd/model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "epd/model/rng.hpp"
#include "kernels/kernels.hpp"

namespace epd::model {
namespace {

// The draws' own stream ("SAMPLE" in ASCII), apart from every weight tensor's (docs/model.md).
constexpr uint64_t kSamplingTag = 0x53414D504C45ull;

bool allowed(TokenId t, TokenFilter f) {
  return f == TokenFilter::none || (t != kBos && t != kImage);
}

std::string show(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

// The rule the reference model always had: highest logit, ties to the lower id (a NaN never wins).
TokenId argmax(std::span<const float> logits, TokenFilter f) {
  TokenId best = 0;
  for (TokenId t = 1; t < logits.size(); ++t) {
    if (!allowed(t, f)) continue;
    if (logits[t] > logits[best]) best = t;
  }
  return best;
}

struct Candidate {
  float logit;
  TokenId id;
  float weight = 0;
};

}  // namespace

protocol::Status validate(const SamplingParams& p) {
  using protocol::ErrorCode;
  // Written so that NaN fails too (every comparison with NaN is false).
  if (!(p.temperature >= 0.0f && p.temperature <= 2.0f))
    return protocol::make_error(ErrorCode::invalid_request,
                                "temperature must be a number in [0, 2], got " + show(p.temperature));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return protocol::make_error(ErrorCode::invalid_request,
                                "top_p must be a number in (0, 1], got " + show(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return protocol::make_error(ErrorCode::invalid_request,
                                "min_p must be a number in [0, 1], got " + show(p.min_p));
  for (const auto& [id, bias] : p.logit_bias)
    if (!(bias >= -100.0f && bias <= 100.0f))
      return protocol::make_error(
          ErrorCode::invalid_request,
          "logit_bias of token " + std::to_string(id) + " must be in [-100, 100], got " + show(bias));
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    return protocol::make_error(
        ErrorCode::invalid_request,
        "presence_penalty must be a number in [-2, 2], got " + show(p.presence_penalty));
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    return protocol::make_error(
        ErrorCode::invalid_request,
        "frequency_penalty must be a number in [-2, 2], got " + show(p.frequency_penalty));
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f))
    return protocol::make_error(
        ErrorCode::invalid_request,
        "repetition_penalty must be a number in (0, 2], got " + show(p.repetition_penalty));
  if (p.top_logprobs > (p.logprobs ? kMaxTopLogprobs : 0))
    return protocol::make_error(ErrorCode::invalid_request, "top_logprobs must be in 0.." +
                                                                std::to_string(kMaxTopLogprobs) +
                                                                (p.logprobs ? "" : " and needs logprobs") +
                                                                ", got " + std::to_string(p.top_logprobs));
  return {};
}

double sampling_uniform(uint64_t seed, uint32_t index) {
  // Output index+1 of the SplitMix64 stream that starts at mix64(seed ^ mix64(tag)): a counter, no state.
  const uint64_t start = mix64(seed ^ mix64(kSamplingTag));
  const uint64_t bits = mix64(start + (uint64_t{index} + 1) * kGolden);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

namespace {

// vLLM's order: the repetition penalty over every token of the sequence, then frequency and presence over
// the generated ones. Sorted copies give each distinct token once (and its count) without a vocab-sized
// table.
void apply_penalties(std::vector<float>& x, const SamplingParams& p, uint32_t index,
                     std::span<const TokenId> history) {
  if (p.repetition_penalty != 1.0f) {
    std::vector<TokenId> seen(history.begin(), history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (TokenId t : seen)
      if (t < x.size()) x[t] = x[t] > 0.0f ? x[t] / p.repetition_penalty : x[t] * p.repetition_penalty;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    const size_t g = std::min<size_t>(index, history.size());
    std::vector<TokenId> gen(history.end() - g, history.end());
    std::sort(gen.begin(), gen.end());
    for (size_t i = 0; i < gen.size();) {
      size_t j = i;
      while (j < gen.size() && gen[j] == gen[i]) ++j;
      if (const TokenId t = gen[i]; t < x.size()) {
        x[t] -= p.frequency_penalty * static_cast<float>(j - i);
        x[t] -= p.presence_penalty;
      }
      i = j;
    }
  }
}

TokenId draw(std::span<const float> logits, const SamplingParams& p, uint32_t index, TokenFilter f);

}  // namespace

std::vector<float> adjusted_logits(std::span<const float> logits, const SamplingParams& p, uint32_t index,
                                   std::span<const TokenId> history) {
  std::vector<float> x(logits.begin(), logits.end());
  for (const auto& [id, bias] : p.logit_bias)
    if (id < x.size()) x[id] += bias;
  if (p.penalized()) apply_penalties(x, p, index, history);
  return x;
}

bool filter_allows(TokenId t, TokenFilter f) {
  return allowed(t, f);
}

TokenId sample_token(std::span<const float> logits, const SamplingParams& p, uint32_t index, TokenFilter f,
                     std::span<const TokenId> history, TokenLogprobs* logprobs) {
  if (logits.empty()) return 0;
  // The draw, then (when asked) the log-probabilities of the very logits it was drawn from.
  auto drawn = [&](std::span<const float> x) {
    const TokenId t = draw(x, p, index, f);
    if (logprobs && p.logprobs) *logprobs = token_logprobs(x, t, p.top_logprobs, f);
    return t;
  };
  if (p.logit_bias.empty() && !p.penalized()) return drawn(logits);
  return drawn(adjusted_logits(logits, p, index, history));
}

namespace {

// Everything after logit_bias and the penalties.
TokenId draw(std::span<const float> logits, const SamplingParams& p, uint32_t index, TokenFilter f) {
  if (p.greedy()) return argmax(logits, f);

  std::vector<Candidate> c;
  c.reserve(logits.size());
  for (TokenId t = 0; t < logits.size(); ++t)
    if (allowed(t, f)) c.push_back({std::isnan(logits[t]) ? -INFINITY : logits[t], t});
  if (c.empty()) return 0;
  // A total order (no NaN left), so the result does not depend on the sort algorithm.
  std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  if (p.top_k > 0 && p.top_k < c.size()) c.resize(p.top_k);
  const float top = c[0].logit;
  if (!std::isfinite(top)) return c[0].id;  // nothing to weigh against

  // Weights relative to the top token (whose weight is exactly 1), with the model's own exp: libm's may
  // differ between hosts. Tokens more than e^87 less likely weigh 0. Sums run in double, in sorted order.
  double total = 0;
  for (Candidate& x : c) {
    const float z = (x.logit - top) / p.temperature;
    x.weight = z < -87.0f ? 0.0f : kernels::exp_det(z);
    total += x.weight;
  }
  size_t keep = c.size();
  double kept = total;
  if (p.top_p < 1.0f) {
    const double target = static_cast<double>(p.top_p) * total;
    double cum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      cum += c[i].weight;
      if (cum >= target) {
        keep = i + 1;
        kept = cum;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    // Weights are relative to the first token's (exactly 1): min_p compares with them as they are.
    while (keep > 1 && c[keep - 1].weight < p.min_p) --keep;
    kept = 0;
    for (size_t i = 0; i < keep; ++i) kept += c[i].weight;
  }
  const double u = sampling_uniform(p.seed, index) * kept;
  double cum = 0;
  TokenId last = c[0].id;
  for (size_t i = 0; i < keep; ++i) {
    if (c[i].weight == 0.0f) continue;
    cum += c[i].weight;
    last = c[i].id;
    if (u < cum) return c[i].id;
  }
  return last;  // u * kept rounded up to kept: the last token with weight
}

}  // namespace

}  // namespace epd::model
