// Log-probabilities (sampling.hpp, token_logprobs): a log-softmax at temperature 1 of the logits the token
// is drawn from, the most likely alternatives in the draw's order, computed beside the draw without
// changing it, and the same from chunked prefill, batched decode and generate().
#include <cmath>

#include "epd/model/generate.hpp"
#include "epd/model/rng.hpp"
#include "epd/model/sampling.hpp"
#include "epd/model/token_constraint.hpp"
#include "helpers.hpp"

using namespace epd::model;
using namespace epd::model::test;

namespace logprobs_test {

std::vector<float> logits_of(uint64_t seed, float scale = 4.0f) {
  SplitMix64 rng(mix64(seed));
  std::vector<float> l(kVocab);
  for (float& x : l) x = rng.uniform_pm1() * scale;
  return l;
}

// The same quantity written the obvious way, with libm in double.
double libm_logprob(const std::vector<float>& l, TokenId t) {
  double m = -INFINITY;
  for (TokenId i = 0; i < l.size(); ++i)
    if (i != kBos && i != kImage) m = std::max(m, double(l[i]));
  double s = 0;
  for (TokenId i = 0; i < l.size(); ++i)
    if (i != kBos && i != kImage) s += std::exp(double(l[i]) - m);
  return double(l[t]) - m - std::log(s);
}

SamplingParams asking(uint32_t top, float temperature = 0, uint64_t seed = 3) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.logprobs = true;
  p.top_logprobs = top;
  return p;
}

}  // namespace logprobs_test

using namespace logprobs_test;

TEST_CASE("logprobs: a log-softmax over the allowed tokens that sums to 1 and matches libm",
          "[model][sampling][logprobs]") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto l = logits_of(seed, seed % 2 ? 4.0f : 20.0f);
    double mass = 0;
    for (TokenId t = 0; t < l.size(); ++t) {
      if (t == kBos || t == kImage) continue;
      const float lp = token_logprobs(l, t, 0).logprob;
      CHECK(lp <= 0.0f);
      CHECK(std::fabs(lp - libm_logprob(l, t)) < 2e-5);
      mass += std::exp(double(lp));
    }
    CHECK(std::fabs(mass - 1.0) < 1e-4);
  }
}

TEST_CASE("top_logprobs: the k most likely, in the draw's order, ties to the lower id, never BOS or IMAGE",
          "[model][sampling][logprobs]") {
  auto l = logits_of(5);
  l[kBos] = 100;  // the most likely of all, but never drawn: never listed either
  l[kImage] = 99;
  l[40] = l[41] = 50;  // a tie at the top: the lower id first
  const TokenLogprobs r = token_logprobs(l, 41, 20);
  REQUIRE(r.top.size() == 20);
  CHECK(r.top[0].id == 40);
  CHECK(r.top[1].id == 41);
  CHECK(r.top[0].logprob == r.top[1].logprob);
  CHECK(r.logprob == r.top[1].logprob);
  std::vector<TokenId> order;
  for (TokenId t = 0; t < l.size(); ++t)
    if (t != kBos && t != kImage) order.push_back(t);
  std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) { return l[a] > l[b]; });
  for (size_t i = 0; i < r.top.size(); ++i) {
    CHECK(r.top[i].id == order[i]);
    CHECK(r.top[i].logprob == token_logprobs(l, order[i], 0).logprob);
    if (i > 0) CHECK(r.top[i].logprob <= r.top[i - 1].logprob);
  }
  CHECK(token_logprobs(l, 41, 3).top.size() == 3);
  CHECK(token_logprobs(l, 41, 0).top.empty());
  // A checkpoint's vocabulary (no filter) lists any id.
  CHECK(token_logprobs(l, 41, 1, TokenFilter::none).top[0].id == kBos);
}

TEST_CASE("logprobs never change the drawn token, and greedy's is the top one",
          "[model][sampling][logprobs]") {
  SamplingParams penalized = asking(5, 0.9f, 11);
  penalized.logit_bias = {{7, 3.0f}, {9, -100.0f}};
  penalized.presence_penalty = 0.5f;
  penalized.repetition_penalty = 1.3f;
  const std::vector<TokenId> history{7, 8, 9, 7, 12};
  for (const SamplingParams& base : {asking(5), asking(5, 0.7f), asking(0, 1.5f, 99), penalized}) {
    SamplingParams plain = base;
    plain.logprobs = false;
    plain.top_logprobs = 0;
    for (uint32_t index = 0; index < 200; ++index) {
      const auto l = logits_of(index + 100);
      TokenLogprobs lp;
      const TokenId with = sample_token(l, base, index % 3, TokenFilter::reference, history, &lp);
      CHECK(with == sample_token(l, plain, index % 3, TokenFilter::reference, history));
      CHECK(lp.top.size() == base.top_logprobs);
      if (base.greedy() && base.top_logprobs > 0) {
        CHECK(lp.top[0].id == with);
        CHECK(lp.top[0].logprob == lp.logprob);
      }
    }
  }
  // Not asked for: nothing is written.
  TokenLogprobs untouched{1.5f, {}};
  sample_token(logits_of(1), {}, 0, TokenFilter::reference, {}, &untouched);
  CHECK(untouched.logprob == 1.5f);
}

TEST_CASE("logprobs are those of the logits after logit_bias and the penalties, at temperature 1",
          "[model][sampling][logprobs]") {
  const auto l = logits_of(8);
  SamplingParams p = asking(3, 1.7f);
  p.logit_bias = {{20, 5.0f}};
  p.frequency_penalty = 1.0f;
  const std::vector<TokenId> history{1, 20, 30, 30};  // the answer so far: 20 once, 30 twice (index 3)
  auto adjusted = l;
  adjusted[20] += 5.0f;
  adjusted[20] -= 1.0f;
  adjusted[30] -= 2.0f;
  TokenLogprobs got;
  const TokenId t = sample_token(l, p, 3, TokenFilter::reference, history, &got);
  CHECK(got == token_logprobs(adjusted, t, 3));
  // The temperature changes the draw's weights, not the reported logprobs.
  p.temperature = 0.3f;
  TokenLogprobs cold;
  const TokenId t2 = sample_token(l, p, 3, TokenFilter::reference, history, &cold);
  CHECK(cold == token_logprobs(adjusted, t2, 3));
  CHECK(cold.top == got.top);
}

TEST_CASE("logprobs: a token with no weight reports the floor, never -inf or NaN",
          "[model][sampling][logprobs]") {
  std::vector<float> l(kVocab, 0.0f);
  l[5] = 1000;
  l[6] = NAN;
  l[7] = -INFINITY;
  l[9] = -20000;
  CHECK(token_logprobs(l, 5, 0).logprob == 0.0f);
  CHECK(token_logprobs(l, 6, 0).logprob == kLogprobFloor);
  CHECK(token_logprobs(l, 7, 0).logprob == kLogprobFloor);
  CHECK(token_logprobs(l, 8, 0).logprob == -1000.0f);  // e^-1000 weighs nothing in the sum, yet is reported
  CHECK(token_logprobs(l, 9, 0).logprob == kLogprobFloor);
  const auto top = token_logprobs(l, 5, 3).top;
  CHECK(top[0].id == 5);
  CHECK(top[1].logprob == -1000.0f);
  std::vector<float> none(kVocab, NAN);
  CHECK(token_logprobs(none, 5, 2).logprob == kLogprobFloor);
  CHECK(token_logprobs(none, 5, 2).top.size() == 2);
}

TEST_CASE("validate: top_logprobs in 0..20, and only with logprobs", "[model][sampling][logprobs]") {
  CHECK(validate(asking(20)).ok());
  CHECK(validate(asking(0)).ok());
  CHECK(!validate(asking(21)).ok());
  SamplingParams p;
  p.top_logprobs = 2;
  CHECK(!validate(p).ok());
}

TEST_CASE("generate: one logprob per token, prefill's first too, the same chunked and batched",
          "[model][sampling][logprobs]") {
  auto r = runner_for("tiny");
  GenerateOptions o;
  o.max_tokens = 12;
  o.stop_at_eos = false;
  o.sampling = asking(4, 0.8f, 5);
  auto ref = generate(*r, "describe", nullptr, o);
  REQUIRE(ref.ok());
  REQUIRE(ref->logprobs.size() == ref->tokens.size());
  GenerateOptions plain = o;
  plain.sampling.logprobs = false;
  plain.sampling.top_logprobs = 0;
  auto without = generate(*r, "describe", nullptr, plain);
  REQUIRE(without.ok());
  CHECK(without->tokens == ref->tokens);
  CHECK(without->logprobs.empty());
  o.chunk = 3;
  auto chunked = generate(*r, "describe", nullptr, o);
  REQUIRE(chunked.ok());
  CHECK(chunked->logprobs == ref->logprobs);

  // By hand: prefill's token, then decode steps in a batch with a sequence that asks for none.
  const Request req = make_request(*r, "describe", nullptr);
  const Request other = make_request(*r, "another", nullptr);
  TestPool tp(r->config(), 8, o.dtype);  // the pool generate() used
  const auto pages = iota_pages(4), other_pages = iota_pages(4, 4);
  PrefillChunk c = slice_prompt(req.prompt, {}, r->config().d_model, 0, req.prompt.size());
  c.sampling = o.sampling;
  TokenLogprobs first_lp;
  c.logprobs = &first_lp;
  auto first = r->prefill_chunk(tp.pool, pages, 0, c);
  REQUIRE(first.ok());
  CHECK(first_lp == ref->logprobs[0]);
  const TokenId other_first = prefill(*r, tp.pool, other_pages, other);
  std::vector<DecodeSeq> batch{DecodeSeq{other_pages, uint32_t(other.prompt.size()), other_first, {}, 1},
                               DecodeSeq{pages, uint32_t(req.prompt.size()), *first, o.sampling, 1}};
  for (size_t step = 1; step < ref->tokens.size(); ++step) {
    std::vector<TokenId> next(2);
    std::vector<TokenLogprobs> lp(2);
    REQUIRE(r->decode_step(tp.pool, batch, next, lp).ok());
    CHECK(next[1] == ref->tokens[step]);
    CHECK(lp[1] == ref->logprobs[step]);
    CHECK(lp[0] == TokenLogprobs{});  // it asked for none
    for (auto& s : batch) {
      s.length += 1;
      s.generated += 1;
    }
    batch[0].last_token = next[0];
    batch[1].last_token = next[1];
  }
}

namespace logprobs_test {

// Allows the even ids only.
struct EvenOnly final : TokenConstraint {
  void apply(std::span<float> logits) override {
    for (size_t t = 1; t < logits.size(); t += 2) logits[t] = -INFINITY;
  }
  bool allows(TokenId t) override { return t % 2 == 0; }
  epd::protocol::Status accept(TokenId) override { return {}; }
};

}  // namespace logprobs_test

TEST_CASE("logprobs under a grammar: those of the masked logits, the token the one drawn without them",
          "[model][sampling][logprobs]") {
  EvenOnly even;
  for (const SamplingParams& p : {asking(4), asking(4, 0.8f, 21)}) {
    for (uint32_t index = 0; index < 50; ++index) {
      auto l = logits_of(index + 500);
      SamplingParams plain = p;
      plain.logprobs = false;
      plain.top_logprobs = 0;
      auto a = l, b = l;
      TokenLogprobs lp;
      const TokenId with = sample_constrained(a, p, index, TokenFilter::reference, {}, &even, &lp);
      CHECK(with == sample_constrained(b, plain, index, TokenFilter::reference, {}, &even));
      CHECK(with % 2 == 0);
      auto masked = l;
      even.apply(masked);
      CHECK(lp == token_logprobs(masked, with, 4));
      for (const TopLogprob& alt : lp.top) CHECK(alt.id % 2 == 0);  // forbidden tokens are not listed
    }
  }
}
