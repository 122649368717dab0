#pragma once
// Tokens' log-probabilities between the model's form (one TokenLogprobs per token) and the wire's
// (protocol::Logprobs, flattened): prefill sends the first token's in KV_STATUS, decode every token's in
// TOKENS and RESULT, the router turns them back for the HTTP layer.
#include <span>
#include <vector>

#include "epd/model/sampling.hpp"
#include "epd/protocol/messages.hpp"

namespace epd::actors {

// Appends one token's: its first `top` alternatives (every token of one message carries as many: the
// fewest any of them has, if a tiny vocabulary had fewer than asked).
void append_logprobs(protocol::Logprobs& wire, const model::TokenLogprobs& token, uint32_t top);
protocol::Logprobs to_wire(std::span<const model::TokenLogprobs> tokens, uint32_t top);

// One per token; `wire` must fit (protocol::logprobs_fit).
std::vector<model::TokenLogprobs> from_wire(const protocol::Logprobs& wire);

}  // namespace epd::actors
