#pragma once
// Choosing the next token from the logits: greedy, or temperature / top-k / top-p sampling with a
// counter-based random draw. A draw depends only on (logits, params, index, history), never on earlier
// draws, so prefill (the first token), decode (the rest), a retried room on another instance and the
// colocated generate() all pick the same token. docs/model.md ("Sampling") gives the exact rule.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "epd/model/tokens.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

struct SamplingParams {
  float temperature = 0;  // 0: greedy (argmax); otherwise in (0, 2]
  float top_p = 1;        // nucleus: keep the most likely tokens whose mass reaches top_p; in (0, 1]
  uint32_t top_k = 0;     // keep at most this many most likely tokens; 0 = no limit
  uint64_t seed = 0;      // with the token's index, the only source of randomness
  float min_p = 0;  // drop tokens less likely than min_p x the most likely one (at the temperature); 0 = off
  // Added to those tokens' logits before anything else (greedy too), each in [-100, 100]: OpenAI's
  // logit_bias. Ids past the logits are ignored.
  std::vector<std::pair<TokenId, float>> logit_bias{};
  // OpenAI's, in [-2, 2]: logit -= frequency x count + presence x (count > 0), counting each token among
  // those generated so far in this answer (not the prompt).
  float presence_penalty = 0;
  float frequency_penalty = 0;
  // vLLM's and HF's, in (0, 2], 1 = off: a token of the prompt or the answer so far has a positive logit
  // divided by it, a negative one multiplied.
  float repetition_penalty = 1;
  // What to report with each drawn token (token_logprobs); never changes which token is drawn. `logprobs`:
  // the drawn token's log-probability; `top_logprobs` (0..kMaxTopLogprobs, only with `logprobs`): that many
  // most likely tokens with theirs. OpenAI's fields of the same names.
  bool logprobs = false;
  uint32_t top_logprobs = 0;

  bool greedy() const { return temperature == 0; }
  // The draw reads the sequence's tokens (sample_token's `history`).
  bool penalized() const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1;
  }
  bool operator==(const SamplingParams&) const = default;
};

// The most alternatives a token may report (OpenAI's top_logprobs limit).
inline constexpr uint32_t kMaxTopLogprobs = 20;

struct TopLogprob {
  TokenId id = 0;
  float logprob = 0;
  bool operator==(const TopLogprob&) const = default;
};

// A drawn token's log-probability and the most likely tokens with theirs (docs/model.md, "Log
// probabilities").
struct TokenLogprobs {
  float logprob = 0;
  std::vector<TopLogprob> top{};  // most likely first (ties: lower id first); empty unless asked for
  bool operator==(const TokenLogprobs&) const = default;
};

// The floor of a reported log-probability (OpenAI's): a token with no weight at all reports this, never -inf.
inline constexpr float kLogprobFloor = -9999.0f;

// invalid_request naming the field unless temperature is in [0, 2], top_p in (0, 1], min_p in [0, 1],
// every logit bias in [-100, 100], presence and frequency penalties in [-2, 2], the repetition penalty in
// (0, 2] (all finite) and top_logprobs in 0..kMaxTopLogprobs (0 unless logprobs).
protocol::Status validate(const SamplingParams& params);

// The token at position `index` of the generated sequence (0 = the one prefill returns), from the logits
// of the position before it (logits[t] is token t's). BOS and IMAGE are never chosen. Greedy: the allowed
// token with the highest logit, ties to the lower id. Otherwise: softmax at `temperature` over the allowed
// tokens, ordered by logit (ties: lower id first), cut to top_k, then to the shortest prefix whose mass
// reaches top_p, then to the tokens at least min_p times as likely as the first, and one draw from that
// prefix keyed by (seed, index). Pure (with `history` an input); `params` must validate and
// `logits` must not be empty.
// `filter`: the reference vocabulary never draws BOS and IMAGE; a checkpoint's vocabulary (TokenFilter::none)
// may draw any id.
// `history`: the sequence's tokens before the drawn one, the prompt then the answer so far; its last `index`
// tokens are the generated ones (a resumed answer's earlier tokens end its prompt, and the index counts
// them, so a retry sees the same). Read only when params.penalized(); logit_bias and the penalties change
// the logits first, in that order (they are copied only then).
// `logprobs`: when set and params.logprobs, receives token_logprobs() of the adjusted logits for the drawn
// token (params.top_logprobs alternatives). It is computed after the draw, from the same logits: the token
// is the one drawn without it.
enum class TokenFilter : uint8_t { reference, none };
TokenId sample_token(std::span<const float> logits, const SamplingParams& params, uint32_t index,
                     TokenFilter filter = TokenFilter::reference, std::span<const TokenId> history = {},
                     TokenLogprobs* logprobs = nullptr);

// The logits the draw orders: `logits` after logit_bias and the penalties (a copy; sample_token's steps).
std::vector<float> adjusted_logits(std::span<const float> logits, const SamplingParams& params,
                                   uint32_t index, std::span<const TokenId> history = {});
// Whether `filter` lets token `t` be drawn at all.
bool filter_allows(TokenId t, TokenFilter filter);

// Log-probabilities of `logits` (after logit_bias and the penalties) at temperature 1, over the tokens
// `filter` allows, before top_k, top_p and min_p: log_softmax(logits)[chosen] and the `top` most likely
// tokens (ordered by logit, ties by lower id, as the draw orders them), each at least kLogprobFloor.
// Deterministic across hosts: the model's own exp and log, sums in double in id order. O(vocab) and no
// allocation beyond the `top` entries.
TokenLogprobs token_logprobs(std::span<const float> logits, TokenId chosen, uint32_t top,
                             TokenFilter filter = TokenFilter::reference);

// The uniform draw in [0, 1) used for token `index` (53 random bits): exposed for tests and docs.
double sampling_uniform(uint64_t seed, uint32_t index);

}  // namespace epd::model
