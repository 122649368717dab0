#include "epd/model/token_constraint.hpp"

namespace epd::model {

TokenId sample_constrained(std::span<float> logits, const SamplingParams& params, uint32_t index,
                           TokenFilter filter, std::span<const TokenId> history, TokenConstraint* constraint,
                           TokenLogprobs* logprobs) {
  // Reported logprobs are the masked logits' whichever way the token is found: no shortcut then.
  const bool report = logprobs && params.logprobs;
  if (constraint && params.greedy() && !report) {
    const TokenId t = sample_token(logits, params, index, filter, history);
    if (constraint->allows(t)) return t;
  }
  if (constraint) constraint->apply(logits);
  return sample_token(logits, params, index, filter, history, logprobs);
}

}  // namespace epd::model
