#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "epd/model/token_constraint.hpp"

namespace epd::model {

namespace {

// Single-token checks a top_k draw may spend before it masks the whole vocabulary instead: a check costs
// 2.5–28 µs on a 32k–152k vocabulary, the mask 2–22 ms (`epd-bench grammar`), so this bound stays well under
// the mask; on a small vocabulary the mask is cheap and the bound is vocab / 128.
constexpr size_t kMaxChecks = 256;
// After this many checks, a draw whose allowed share so far cannot reach top_k within the bound gives up.
constexpr size_t kJudgeAfter = 32;

// The top_k tokens the draw would keep among those `constraint` allows, found by asking it about the most
// likely tokens one at a time (in the draw's order: adjusted logit, ties to the lower id); nullopt when
// fewer than top_k are allowed among the first kMaxChecks, or one of them has no finite logit.
std::optional<std::vector<TokenId>> allowed_top_k(std::span<const float> logits, const SamplingParams& p,
                                                  uint32_t index, TokenFilter filter,
                                                  std::span<const TokenId> history,
                                                  TokenConstraint& constraint) {
  const size_t budget = std::min(kMaxChecks, logits.size() / 128);
  if (p.top_k > budget) return std::nullopt;
  const std::vector<float> x = adjusted_logits(logits, p, index, history);
  struct Candidate {
    float logit;
    TokenId id;
  };
  std::vector<Candidate> c;
  c.reserve(x.size());
  for (TokenId t = 0; t < x.size(); ++t)
    if (filter_allows(t, filter)) c.push_back({std::isnan(x[t]) ? -INFINITY : x[t], t});
  const auto first = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  const size_t window = std::min(c.size(), budget);
  std::nth_element(c.begin(), c.begin() + window - (window > 0), c.end(), first);
  std::sort(c.begin(), c.begin() + window, first);
  std::vector<TokenId> kept;
  for (size_t i = 0; i < window && kept.size() < p.top_k; ++i) {
    if (!std::isfinite(c[i].logit)) return std::nullopt;
    if (constraint.allows(c[i].id)) kept.push_back(c[i].id);
    // A grammar that allows few of the likely tokens (`"yes" | "no"`): the mask, before more checks.
    if (i + 1 >= kJudgeAfter && kept.size() * window < p.top_k * (i + 1)) return std::nullopt;
  }
  if (kept.size() < p.top_k) return std::nullopt;
  return kept;
}

}  // namespace

TokenId sample_constrained(std::span<float> logits, const SamplingParams& params, uint32_t index,
                           TokenFilter filter, std::span<const TokenId> history, TokenConstraint* constraint,
                           TokenLogprobs* logprobs) {
  // Reported logprobs are the masked logits' whichever way the token is found: no shortcut then.
  const bool report = logprobs && params.logprobs;
  if (constraint && params.greedy() && !report) {
    const TokenId t = sample_token(logits, params, index, filter, history);
    if (constraint->allows(t)) return t;
  }
  if (constraint && !params.greedy() && params.top_k > 0 && !report) {
    // Only the top_k allowed tokens can be drawn: with every other token at -infinity the draw keeps exactly
    // them, in the same order and with the same weights, as it would after the full mask.
    if (auto kept = allowed_top_k(logits, params, index, filter, history, *constraint)) {
      std::vector<float> only(logits.size(), -INFINITY);
      for (TokenId t : *kept) only[t] = logits[t];
      return sample_token(only, params, index, filter, history);
    }
  }
  if (constraint) constraint->apply(logits);
  return sample_token(logits, params, index, filter, history, logprobs);
}

}  // namespace epd::model
