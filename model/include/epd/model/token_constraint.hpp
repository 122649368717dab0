#pragma once
// A rule over which token may come next (constrained decoding: a grammar, epd/model/grammar.hpp). The runner
// draws through sample_constrained (PrefillChunk::constraint, DecodeSeq::constraint): the draw itself
// (sample_token) is unchanged, on logits where the forbidden tokens are -infinity; whoever owns the sequence
// tells the constraint each drawn token.
#include <span>

#include "epd/model/sampling.hpp"
#include "epd/model/tokens.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token it forbids next to -infinity; leaves the others as they are.
  virtual void apply(std::span<float> logits) = 0;
  // Whether `token` may come next (what apply() leaves finite), for one token.
  virtual bool allows(TokenId token) = 0;
  // The token drawn next: advances the state. invalid_request if it is forbidden (the state is then
  // unusable).
  virtual protocol::Status accept(TokenId token) = 0;
};

// sample_token on `logits` with what `constraint` forbids at -infinity (none: sample_token itself); the
// logits may be changed. Greedy draws first take the unmasked argmax and keep it when the constraint allows
// it: the masked argmax is then the same token (masking only lowers others; ties still go to the lower id),
// so the full mask, one pass of the grammar over the vocabulary, is only paid when the model's choice is
// forbidden. Sampled draws with top_k ask about the most likely tokens one at a time until top_k are allowed
// (at most 256 checks): only those can be drawn, so the draw on them alone equals the masked one. Other
// sampled draws mask first, and so do draws that report logprobs (sample_token's `logprobs`, with
// params.logprobs): theirs are those of the masked logits, the tokens the grammar forbids left out
// (docs/model.md, "Log probabilities").
TokenId sample_constrained(std::span<float> logits, const SamplingParams& params, uint32_t index,
                           TokenFilter filter, std::span<const TokenId> history, TokenConstraint* constraint,
                           TokenLogprobs* logprobs = nullptr);

}  // namespace epd::model
