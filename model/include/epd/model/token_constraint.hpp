#pragma once
// A rule over which token may come next (constrained decoding: a grammar, epd/model/grammar.hpp). The runner
// applies it to a position's logits before the draw (PrefillChunk::constraint, DecodeSeq::constraint), so
// the draw itself (sample_token) is unchanged; whoever owns the sequence tells it each drawn token.
#include <span>

#include "epd/model/tokens.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token it forbids next to -infinity; leaves the others as they are.
  virtual void apply(std::span<float> logits) = 0;
  // The token drawn next: advances the state. invalid_request if it is forbidden (the state is then
  // unusable).
  virtual protocol::Status accept(TokenId token) = 0;
};

}  // namespace epd::model
