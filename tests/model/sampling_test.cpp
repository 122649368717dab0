// Sampling: greedy is the old rule bit for bit, draws are counter-based (seed, index) and follow the softmax,
// top-k / top-p cut the candidates, and prefill + decode with sampling equal the colocated generate().
#include <cmath>
#include <map>
#include <set>

#include "epd/model/generate.hpp"
#include "epd/model/rng.hpp"
#include "epd/model/sampling.hpp"
#include "helpers.hpp"

using namespace epd::model;
using namespace epd::model::test;

namespace {

std::vector<float> random_logits(uint64_t seed, float scale = 4.0f) {
  SplitMix64 rng(mix64(seed));
  std::vector<float> l(kVocab);
  for (float& x : l) x = rng.uniform_pm1() * scale;
  return l;
}

// The rule the reference model used before sampling existed, written out again.
TokenId old_greedy(const std::vector<float>& l) {
  TokenId best = 0;
  for (TokenId t = 1; t < l.size(); ++t) {
    if (t == kBos || t == kImage) continue;
    if (l[t] > l[best]) best = t;
  }
  return best;
}

SamplingParams sampled(float temperature, float top_p = 1, uint32_t top_k = 0, uint64_t seed = 7) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  p.seed = seed;
  return p;
}

// Logits where only tokens 0..values.size()-1 can win anything (the rest are e^-1000 less likely).
std::vector<float> few_logits(std::vector<float> values) {
  std::vector<float> l(kVocab, -1000.0f);
  std::copy(values.begin(), values.end(), l.begin());
  return l;
}

// 24 tokens with `p`, whatever they are (EOS does not end them).
GenerateOptions answer_of_24(const SamplingParams& p) {
  GenerateOptions o;
  o.max_tokens = 24;
  o.stop_at_eos = false;
  o.sampling = p;
  return o;
}

}  // namespace

TEST_CASE("greedy: argmax over the allowed tokens, ties to the lower id, never BOS or IMAGE",
          "[model][sampling]") {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const auto l = random_logits(seed);
    CHECK(sample_token(l, {}, seed) == old_greedy(l));
  }
  auto l = few_logits({1, 3, 3, 2});
  CHECK(sample_token(l, {}, 0) == 1);
  l[kBos] = 50;
  l[kImage] = 60;
  CHECK(sample_token(l, {}, 0) == 1);
  l[kEos] = 3;  // a tie with a higher id loses
  CHECK(sample_token(l, {}, 0) == 1);
  l[kEos] = 3.5f;
  CHECK(sample_token(l, {}, 0) == kEos);
}

TEST_CASE("greedy generation gives the tokens recorded before sampling existed", "[model][sampling]") {
  // epd-run --preset tiny --max-tokens 40 --prompt Hello, recorded from the greedy-only model.
  const std::vector<TokenId> recorded{139, 116, 33,  116, 33,  6,  189, 76,  206, 200, 101, 240, 240, 240,
                                      36,  101, 197, 227, 2,   79, 103, 76,  103, 122, 103, 227, 223, 68,
                                      130, 228, 2,   69,  223, 75, 243, 192, 204, 83,  196, 213};
  auto r = runner_for("tiny");
  GenerateOptions o;
  o.max_tokens = 40;
  auto res = generate(*r, "Hello", nullptr, o);
  REQUIRE(res.ok());
  CHECK(res->tokens == recorded);
  CHECK_FALSE(res->stopped_at_eos);
}

TEST_CASE("a draw depends on seed and index only: the same pair gives the same token in any order",
          "[model][sampling]") {
  const auto l = random_logits(3, 2.0f);
  const auto p = sampled(1.0f, 0.95f, 50, 42);
  std::vector<TokenId> forward, backward(64);
  for (uint32_t i = 0; i < 64; ++i) forward.push_back(sample_token(l, p, i));
  for (uint32_t i = 64; i-- > 0;) backward[i] = sample_token(l, p, i);
  CHECK(forward == backward);
  CHECK(sample_token(l, p, 17) == forward[17]);
  CHECK(std::set<TokenId>(forward.begin(), forward.end()).size() > 8);  // it does sample
  for (uint32_t i = 0; i < 1000; ++i) {
    const double u = sampling_uniform(42, i);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
  }
  CHECK(sampling_uniform(1, 5) == sampling_uniform(1, 5));
  CHECK(sampling_uniform(1, 5) != sampling_uniform(2, 5));
  CHECK(sampling_uniform(1, 5) != sampling_uniform(1, 6));
}

TEST_CASE("different seeds give different draws", "[model][sampling]") {
  const auto l = random_logits(5, 1.0f);
  std::set<TokenId> at_index_0;
  for (uint64_t seed = 0; seed < 100; ++seed)
    at_index_0.insert(sample_token(l, sampled(1.0f, 1, 0, seed), 0));
  CHECK(at_index_0.size() > 20);
  std::vector<TokenId> a, b;
  for (uint32_t i = 0; i < 32; ++i) {
    a.push_back(sample_token(l, sampled(1.0f, 1, 0, 1), i));
    b.push_back(sample_token(l, sampled(1.0f, 1, 0, 2), i));
  }
  CHECK(a != b);
}

TEST_CASE("top_k = 1 and a tiny top_p are greedy whatever the seed", "[model][sampling]") {
  for (uint64_t seed = 0; seed < 100; ++seed) {
    const auto l = random_logits(seed + 1000);
    const TokenId g = old_greedy(l);
    CHECK(sample_token(l, sampled(1.5f, 1, 1, seed), uint32_t(seed)) == g);
    CHECK(sample_token(l, sampled(1.5f, 1e-6f, 0, seed), uint32_t(seed)) == g);
  }
  // Ties at the top: the lower id, as greedy.
  const auto tie = few_logits({0, 5, 5});
  CHECK(sample_token(tie, sampled(1, 1, 1), 3) == 1);
  CHECK(sample_token(tie, sampled(1, 1e-6f), 3) == 1);
}

TEST_CASE("BOS and IMAGE are never drawn, however likely", "[model][sampling]") {
  auto l = few_logits({0, 0});
  l[kBos] = 10;
  l[kImage] = 10;
  for (uint32_t i = 0; i < 500; ++i) {
    const TokenId t = sample_token(l, sampled(2.0f, 1, 0, 9), i);
    REQUIRE((t == 0 || t == 1));
  }
}

TEST_CASE("temperature sampling follows the softmax (chi-square over 20000 fixed draws)",
          "[model][sampling]") {
  const std::vector<float> values{2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -2.0f};
  const auto l = few_logits(values);
  const float temperature = 0.7f;
  std::vector<double> expect(values.size());
  double z = 0;
  for (size_t i = 0; i < values.size(); ++i) z += expect[i] = std::exp((values[i] - values[0]) / temperature);
  constexpr uint32_t kDraws = 20000;
  std::vector<uint32_t> seen(values.size());
  for (uint32_t i = 0; i < kDraws; ++i) {
    const TokenId t = sample_token(l, sampled(temperature, 1, 0, 12345), i);
    REQUIRE(t < values.size());
    ++seen[t];
  }
  double chi2 = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double e = expect[i] / z * kDraws;
    chi2 += (seen[i] - e) * (seen[i] - e) / e;
  }
  INFO("chi-square " << chi2);
  CHECK(chi2 < 24.3);  // 7 degrees of freedom, p = 0.001 (the draws are fixed: this cannot flake)

  // A higher temperature flattens the distribution.
  std::vector<uint32_t> hot(values.size());
  for (uint32_t i = 0; i < kDraws; ++i) ++hot[sample_token(l, sampled(2.0f, 1, 0, 12345), i)];
  CHECK(hot[0] < seen[0]);
  CHECK(hot[7] > seen[7]);
}

TEST_CASE("top_k and top_p keep only the most likely tokens, renormalised", "[model][sampling]") {
  const auto l = few_logits({3.0f, 2.0f, 1.0f, 0.0f, -1.0f});
  constexpr uint32_t kDraws = 6000;
  std::map<TokenId, uint32_t> k2, p;
  for (uint32_t i = 0; i < kDraws; ++i) {
    ++k2[sample_token(l, sampled(1, 1, 2, 77), i)];
    ++p[sample_token(l, sampled(1, 0.8f, 0, 77), i)];
  }
  // top_k 2: tokens 0 and 1 at e : 1.
  CHECK(k2.size() == 2);
  CHECK(std::abs(double(k2[0]) / kDraws - std::exp(1.0) / (std::exp(1.0) + 1)) < 0.03);
  // Softmax masses 0.64, 0.24, 0.09, ...: 0.8 is reached with tokens 0 and 1 (0.88), renormalised.
  CHECK(p.size() == 2);
  CHECK(std::abs(double(p[0]) / kDraws - 0.64 / 0.88) < 0.03);
}

TEST_CASE("validate: temperature from 0 to 2, top_p above 0 and at most 1, both finite",
          "[model][sampling]") {
  CHECK(validate(SamplingParams{}).ok());
  CHECK(validate(sampled(2.0f, 1e-9f, 1000000, ~uint64_t{0})).ok());
  for (float t : {-0.01f, 2.01f, NAN, INFINITY}) {
    auto st = validate(sampled(t));
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == epd::protocol::ErrorCode::invalid_request);
    CHECK_THAT(st.error().detail, Catch::Contains("temperature"));
  }
  for (float p : {0.0f, -1.0f, 1.01f, NAN}) {
    auto st = validate(sampled(1.0f, p));
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().detail, Catch::Contains("top_p"));
  }
  for (float m : {-0.01f, 1.01f, NAN}) {
    SamplingParams p = sampled(1.0f);
    p.min_p = m;
    auto st = validate(p);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().detail, Catch::Contains("min_p must be a number in [0, 1]"));
  }
}

TEST_CASE("logit_bias is added before anything else: it moves the greedy token and bans or forces one",
          "[model][sampling]") {
  const std::vector<float> logits{0.0f, 1.0f, 3.0f, 2.0f};
  SamplingParams p;
  CHECK(sample_token(logits, p, 0, TokenFilter::none) == 2);
  p.logit_bias = {{2, -100.0f}};
  CHECK(sample_token(logits, p, 0, TokenFilter::none) == 3);  // banned: the next best
  p.logit_bias = {{0, 3.5f}, {99, 100.0f}};                   // an id past the logits is ignored
  CHECK(sample_token(logits, p, 0, TokenFilter::none) == 0);
  SamplingParams warm = sampled(1.0f, 1, 0, 9);
  warm.logit_bias = {{1, 100.0f}};  // forced, whatever the draw
  for (uint32_t i = 0; i < 200; ++i) CHECK(sample_token(logits, warm, i, TokenFilter::none) == 1);
  warm.logit_bias = {{1, 100.5f}};
  CHECK_THAT(validate(warm).error().detail, Catch::Contains("logit_bias of token 1 must be in [-100, 100]"));
}

TEST_CASE("min_p draws only tokens at least that likely relative to the most likely one, at the temperature",
          "[model][sampling]") {
  // At temperature 1 the weights relative to token 0 are 1, e^-1 = 0.37, e^-2 = 0.14 and e^-4 = 0.018.
  const std::vector<float> logits{0.0f, -1.0f, -2.0f, -4.0f};
  auto drawn = [&](float temperature, float min_p) {
    SamplingParams p = sampled(temperature, 1, 0, 3);
    p.min_p = min_p;
    std::set<TokenId> seen;
    for (uint32_t i = 0; i < 2000; ++i) seen.insert(sample_token(logits, p, i, TokenFilter::none));
    return seen;
  };
  CHECK(drawn(1.0f, 0.0f) == std::set<TokenId>{0, 1, 2, 3});
  CHECK(drawn(1.0f, 0.1f) == std::set<TokenId>{0, 1, 2});
  CHECK(drawn(1.0f, 0.3f) == std::set<TokenId>{0, 1});
  CHECK(drawn(1.0f, 1.0f) == std::set<TokenId>{0});
  // At temperature 2 the same logits are flatter: e^-1 = 0.37 for token 2 passes 0.3 now.
  CHECK(drawn(2.0f, 0.3f) == std::set<TokenId>{0, 1, 2});
  // With min_p 0 the draw is exactly the one without it.
  SamplingParams off = sampled(0.8f, 0.9f, 3, 5);
  for (uint32_t i = 0; i < 50; ++i) {
    SamplingParams zero = off;
    zero.min_p = 0;
    CHECK(sample_token(logits, off, i, TokenFilter::none) ==
          sample_token(logits, zero, i, TokenFilter::none));
  }
}

// Greedy draws over a few tokens (any id may win) with `history` before them, `generated` of it the answer.
static TokenId greedy_pick(std::vector<float> logits, const SamplingParams& p, std::vector<TokenId> history,
                           uint32_t generated) {
  return sample_token(logits, p, generated, TokenFilter::none, history);
}

TEST_CASE("presence and frequency penalties: logit minus frequency x count minus presence, answer only",
          "[model][sampling]") {
  const std::vector<float> logits{3.0f, 2.5f, 2.0f, 0.0f};
  SamplingParams presence;
  presence.presence_penalty = 1.0f;
  CHECK(greedy_pick(logits, {}, {1, 0}, 1) == 0);
  CHECK(greedy_pick(logits, presence, {1, 0}, 1) == 1);  // 3 - 1 = 2 < 2.5
  // The same token in the prompt only: not penalized (OpenAI's and vLLM's rule).
  CHECK(greedy_pick(logits, presence, {0, 1}, 0) == 0);
  CHECK(greedy_pick(logits, presence, {0, 0, 0, 1}, 1) == 0);  // 1 is the answer; 0s are the prompt
  // Presence counts a token once, frequency once per occurrence.
  SamplingParams p03;
  p03.presence_penalty = 0.3f;
  CHECK(greedy_pick(logits, p03, {7, 0, 0}, 2) == 0);  // 3 - 0.3 = 2.7
  SamplingParams f03;
  f03.frequency_penalty = 0.3f;
  CHECK(greedy_pick(logits, f03, {7, 0}, 1) == 0);     // 3 - 0.3 = 2.7 > 2.5
  CHECK(greedy_pick(logits, f03, {7, 0, 0}, 2) == 1);  // 3 - 0.6 = 2.4 < 2.5
  CHECK(greedy_pick(logits, f03, {0, 0, 7}, 1) == 0);  // the 0s are the prompt's
  // Negative values favour what was generated.
  SamplingParams favour;
  favour.presence_penalty = -1.5f;
  CHECK(greedy_pick(logits, favour, {2}, 1) == 2);  // 2 + 1.5 = 3.5
  favour.presence_penalty = 0;
  favour.frequency_penalty = -0.6f;
  CHECK(greedy_pick(logits, favour, {2, 2}, 2) == 2);  // 2 + 1.2 = 3.2
  CHECK(greedy_pick(logits, favour, {2, 2}, 1) == 0);  // 2 + 0.6 = 2.6
  // Both, by the formula: 3 - 0.2 x 2 - 0.15 = 2.45 < 2.5, which neither alone reaches.
  SamplingParams both;
  both.frequency_penalty = 0.2f;
  both.presence_penalty = 0.15f;
  CHECK(greedy_pick(logits, both, {0, 0}, 2) == 1);
  both.presence_penalty = 0;
  CHECK(greedy_pick(logits, both, {0, 0}, 2) == 0);
}

TEST_CASE("repetition_penalty divides positive and multiplies negative logits of prompt and answer tokens",
          "[model][sampling]") {
  SamplingParams r;
  r.repetition_penalty = 1.5f;
  const std::vector<float> pos{2.0f, 1.8f, 1.0f};
  CHECK(greedy_pick(pos, r, {}, 0) == 0);
  CHECK(greedy_pick(pos, r, {0}, 0) == 1);     // in the prompt: 2 / 1.5 = 1.33
  CHECK(greedy_pick(pos, r, {5, 0}, 1) == 1);  // in the answer too
  CHECK(greedy_pick(pos, r, {0, 1}, 0) == 0);  // both penalized: 1.33 > 1.2
  const std::vector<float> neg{-1.0f, -1.2f};
  CHECK(greedy_pick(neg, r, {0}, 0) == 1);  // -1 x 1.5 = -1.5 < -1.2 (dividing would keep 0 ahead)
  // Once per distinct token, however often it occurs: 2 / 1.5 = 1.33 > 1, not 2 / 1.5^3 = 0.59.
  CHECK(greedy_pick({2.0f, 1.0f}, r, {0, 0, 0}, 1) == 0);
  // Below 1 it favours them.
  r.repetition_penalty = 0.5f;
  CHECK(greedy_pick({2.0f, 1.5f}, r, {1}, 0) == 1);  // 1.5 / 0.5 = 3
}

TEST_CASE("penalties: the draw equals one over the logits adjusted by hand, after logit_bias",
          "[model][sampling]") {
  // The tokens the history names lead, so how each is adjusted decides the draws.
  std::vector<float> logits = random_logits(5, 3.0f);
  for (auto [t, v] :
       std::map<TokenId, float>{{'a', 5.0f}, {'b', 4.6f}, {'c', 4.8f}, {'x', 3.6f}, {'y', 4.9f}})
    logits[t] = v;
  const std::vector<TokenId> history{'a', 'b', 'c', 'a', 'x', 'y', 'x', 'x', 'b', 300, kBos};
  const uint32_t generated =
      7;  // x y x x b 300 (past the vocab: ignored) and BOS; the first x is the prompt's
  for (SamplingParams p : {SamplingParams{}, sampled(1.0f, 0.95f, 50, 3)}) {
    p.logit_bias = {{'x', 1.5f}};
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.4f;
    p.presence_penalty = -0.25f;
    std::vector<float> hand = logits;
    hand['x'] += 1.5f;
    for (TokenId t : {TokenId('a'), TokenId('b'), TokenId('c'), TokenId('x'), TokenId('y'), kBos})
      hand[t] = hand[t] > 0 ? hand[t] / 1.3f : hand[t] * 1.3f;
    for (auto [t, count] : std::map<TokenId, int>{{'x', 3}, {'y', 1}, {'b', 1}, {kBos, 1}}) {
      hand[t] -= 0.4f * float(count);
      hand[t] -= -0.25f;
    }
    SamplingParams plain = p;
    plain.logit_bias.clear();
    plain.repetition_penalty = 1;
    plain.frequency_penalty = plain.presence_penalty = 0;
    for (uint32_t i = 0; i < 300; ++i)
      CHECK(sample_token(logits, p, generated, TokenFilter::reference, history) ==
            sample_token(hand, plain, generated, TokenFilter::reference));
  }
}

TEST_CASE("no penalty: the draw is the one without history, and validate bounds each penalty",
          "[model][sampling]") {
  const std::vector<TokenId> history{'a', 'a', 'b', 'a'};
  for (uint64_t k = 0; k < 20; ++k) {
    const std::vector<float> logits = random_logits(100 + k);
    SamplingParams p = k % 2 ? sampled(0.9f, 0.9f, 0, k) : SamplingParams{};
    REQUIRE_FALSE(p.penalized());
    CHECK(sample_token(logits, p, 2, TokenFilter::reference, history) ==
          sample_token(logits, p, 2, TokenFilter::reference));
  }
  auto refused = [](SamplingParams p, const char* what) {
    auto st = validate(p);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().detail, Catch::Contains(what));
  };
  for (float v : {-2.01f, 2.01f, NAN, INFINITY}) {
    SamplingParams p;
    p.presence_penalty = v;
    refused(p, "presence_penalty must be a number in [-2, 2]");
    p = {};
    p.frequency_penalty = v;
    refused(p, "frequency_penalty must be a number in [-2, 2]");
  }
  for (float v : {0.0f, -1.0f, 2.01f, NAN}) {
    SamplingParams p;
    p.repetition_penalty = v;
    refused(p, "repetition_penalty must be a number in (0, 2]");
  }
  for (float v : {-2.0f, 2.0f}) {
    SamplingParams p;
    p.presence_penalty = p.frequency_penalty = v;
    p.repetition_penalty = v > 0 ? v : 0.01f;
    CHECK(validate(p).ok());
  }
}

TEST_CASE("the runner refuses bad sampling params before writing anything", "[model][sampling]") {
  auto r = runner_for("tiny");
  const Request req = make_request(*r, "hi", nullptr);
  TestPool tp(r->config(), 2);
  const auto pages = iota_pages(2);
  PrefillChunk c = slice_prompt(req.prompt, {}, r->config().d_model, 0, req.prompt.size());
  c.sampling = sampled(3.0f);
  auto t = r->prefill_chunk(tp.pool, pages, 0, c);
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.error().detail, Catch::Contains("temperature"));
  DecodeSeq s{pages, 3, 65, sampled(1.0f, 0.0f), 1};
  TokenId next = 0;
  CHECK_FALSE(r->decode_step(tp.pool, {&s, 1}, {&next, 1}).ok());
  CHECK(tp.all_zero());
  GenerateOptions o;
  o.sampling = sampled(NAN);
  CHECK_FALSE(generate(*r, "hi", nullptr, o).ok());
  // A penalty without the tokens it counts would draw what no other role draws.
  c.sampling = {};
  c.sampling.frequency_penalty = 0.5f;
  auto missing = r->prefill_chunk(tp.pool, pages, 0, c);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().detail, Catch::Contains("history tokens"));
  s.sampling = c.sampling;
  CHECK_FALSE(r->decode_step(tp.pool, {&s, 1}, {&next, 1}).ok());
  CHECK(tp.all_zero());
}

TEST_CASE("sampled generation: chunked prefill, batched decode and generate() draw the same tokens",
          "[model][sampling]") {
  auto r = runner_for("tiny");
  const Image img = make_test_image(24, 16, 4);
  const SamplingParams p = sampled(0.8f, 0.9f, 40, 7);
  GenerateOptions o = answer_of_24(p);
  auto ref = generate(*r, "describe", &img, o);
  REQUIRE(ref.ok());
  REQUIRE(ref->tokens.size() == 24);
  o.chunk = 5;
  auto chunked = generate(*r, "describe", &img, o);
  REQUIRE(chunked.ok());
  CHECK(chunked->tokens == ref->tokens);
  CHECK(chunked->kv_digest == ref->kv_digest);
  GenerateOptions greedy = o;
  greedy.sampling = {};
  auto g = generate(*r, "describe", &img, greedy);
  REQUIRE(g.ok());
  CHECK(g->tokens != ref->tokens);
  o.sampling.seed = 8;
  auto other_seed = generate(*r, "describe", &img, o);
  REQUIRE(other_seed.ok());
  CHECK(other_seed->tokens != ref->tokens);

  // By hand, as the roles do it: prefill draws index 0, each decode step the index of its token, and the
  // sequence shares its batch with another one that samples differently.
  const Request req = make_request(*r, "describe", &img);
  const Request other = make_request(*r, "another sequence", nullptr);
  TestPool tp(r->config(), 8);
  const auto pages = iota_pages(4), other_pages = iota_pages(4, 4);
  PrefillChunk c = slice_prompt(req.prompt, req.emb.data, r->config().d_model, 0, req.prompt.size());
  c.sampling = p;
  auto first = r->prefill_chunk(tp.pool, pages, 0, c);
  REQUIRE(first.ok());
  const TokenId other_first = prefill(*r, tp.pool, other_pages, other);
  std::vector<DecodeSeq> batch{
      DecodeSeq{other_pages, uint32_t(other.prompt.size()), other_first, sampled(1.2f, 1, 0, 99), 1},
      DecodeSeq{pages, uint32_t(req.prompt.size()), *first, p, 1}};
  std::vector<TokenId> got{*first};
  while (got.size() < 24) {
    std::vector<TokenId> next(2);
    REQUIRE(r->decode_step(tp.pool, batch, next).ok());
    for (size_t i = 0; i < 2; ++i) {
      batch[i].length += 1;
      batch[i].generated += 1;
      batch[i].last_token = next[i];
    }
    got.push_back(next[1]);
  }
  CHECK(got == ref->tokens);
}

TEST_CASE("generate() says whether EOS ended the sequence", "[model][sampling]") {
  auto r = runner_for("tiny");
  // Look for a seed whose draws hit EOS within 64 tokens at a high temperature; fixed search, no flake.
  GenerateOptions o;
  o.max_tokens = 64;
  bool found = false;
  for (uint64_t seed = 0; seed < 200 && !found; ++seed) {
    o.sampling = sampled(2.0f, 1, 0, seed);
    auto res = generate(*r, "eos?", nullptr, o);
    REQUIRE(res.ok());
    if (!res->stopped_at_eos) continue;
    found = true;
    CHECK(res->tokens.back() == kEos);
    CHECK(res->tokens.size() <= 64);
    CHECK_THAT(to_json(*res), Catch::Contains("\"stopped_at_eos\":true"));
  }
  CHECK(found);
}

// What a router does when a decode hands a room over mid-answer (docs/failure-handling.md): prefill runs the
// prompt followed by the k tokens streamed so far and draws token k, decode the rest. Since a draw is a
// function of (seed, index) and prefill's K/V of a token equals decode's, the rest is the same answer.
TEST_CASE("a resumed answer, from prompt + its first k tokens, draws the rest of the same answer",
          "[model][sampling]") {
  auto r = runner_for("tiny");
  const Image img = make_test_image(24, 16, 4);
  const Media item = img;
  // The penalties count the answer so far: on a resumed attempt its first k tokens end the prompt.
  SamplingParams penalized_greedy;
  penalized_greedy.frequency_penalty = 0.7f;
  penalized_greedy.presence_penalty = 0.3f;
  penalized_greedy.repetition_penalty = 1.2f;
  SamplingParams penalized_sampled = sampled(0.8f, 0.9f, 40, 11);
  penalized_sampled.presence_penalty = 1.0f;
  penalized_sampled.repetition_penalty = 1.3f;
  for (const SamplingParams& p :
       {SamplingParams{}, sampled(0.8f, 0.9f, 40, 11), penalized_greedy, penalized_sampled}) {
    const GenerateOptions o = answer_of_24(p);
    auto whole = generate(*r, "describe", &img, o);
    REQUIRE(whole.ok());
    REQUIRE(whole->tokens.size() == 24);
    for (uint32_t k : {1u, 5u, 23u}) {
      INFO("temperature " << p.temperature << ", resumed after " << k << " tokens");
      std::vector<TokenId> prompt = whole->prompt;
      prompt.insert(prompt.end(), whole->tokens.begin(), whole->tokens.begin() + k);
      GenerateOptions rest = o;
      rest.first_index = k;
      rest.max_tokens = 24 - k;
      rest.chunk = 7;  // the resumed prompt need not be prefilled as the first was
      auto resumed = generate_tokens(*r, prompt, rest, {&item, 1});
      REQUIRE(resumed.ok());
      CHECK(resumed->tokens == std::vector<TokenId>(whole->tokens.begin() + k, whole->tokens.end()));
      CHECK(resumed->kv_digest == whole->kv_digest);
    }
  }
  // The penalties did change those answers, so the loop above resumed answers they shaped.
  auto plain = generate(*r, "describe", &img, answer_of_24({}));
  auto penalized = generate(*r, "describe", &img, answer_of_24(penalized_greedy));
  REQUIRE(plain.ok());
  REQUIRE(penalized.ok());
  CHECK(penalized->tokens != plain->tokens);
  // The index matters: the same prompt drawn as a new answer (index 0 onwards) is another answer.
  GenerateOptions o;
  o.max_tokens = 8;
  o.stop_at_eos = false;
  o.sampling = sampled(1.0f, 1.0f, 0, 11);
  auto whole = generate(*r, "describe", &img, o);
  REQUIRE(whole.ok());
  std::vector<TokenId> prompt = whole->prompt;
  prompt.insert(prompt.end(), whole->tokens.begin(), whole->tokens.begin() + 3);
  o.max_tokens = 5;
  auto fresh = generate_tokens(*r, prompt, o, {&item, 1});
  REQUIRE(fresh.ok());
  CHECK(fresh->tokens != std::vector<TokenId>(whole->tokens.begin() + 3, whole->tokens.end()));
}
