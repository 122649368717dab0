// token_logprobs (sampling.hpp): the log-softmax at temperature 1 of the logits a token is drawn from, for
// OpenAI's logprobs and top_logprobs. Every operation is fixed: the model's exp_det for each term, a sum in
// double in id order, and a log of our own (libm's log may take another code path on another CPU), so
// prefill, decode and the colocated run report the same bits on any host.
#include <cmath>
#include <vector>

#include "epd/model/sampling.hpp"
#include "kernels/kernels.hpp"

namespace epd::model {
namespace {

bool allowed(TokenId t, TokenFilter f) {
  return f == TokenFilter::none || (t != kBos && t != kImage);
}

// log(x) for a finite x >= 1 (the sum of weights, the top one exactly 1): x = m 2^e with m in
// [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.1716, by its series to s^29
// (the next term is below 2^-70 of the sum).
double log_det(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // [0.5, 1): exact
  if (m < 0.70710678118654752440) {
    m *= 2;
    e -= 1;
  }
  const double s = (m - 1) / (m + 1), s2 = s * s;
  double p = 1.0 / 29;
  for (int k = 27; k >= 1; k -= 2) p = p * s2 + 1.0 / k;
  return 2 * s * p + e * 0.69314718055994530942;
}

// Higher first, ties to the lower id (the draw's order).
bool before(float a, TokenId ia, float b, TokenId ib) {
  return a > b || (a == b && ia < ib);
}

float clamp(double v) {
  return v > double(kLogprobFloor) ? float(v) : kLogprobFloor;
}

}  // namespace

TokenLogprobs token_logprobs(std::span<const float> logits, TokenId chosen, uint32_t top, TokenFilter f) {
  TokenLogprobs out;
  // The top logit m of the allowed tokens (a NaN counts as -inf, as in the draw).
  float m = -INFINITY;
  for (TokenId t = 0; t < logits.size(); ++t)
    if (allowed(t, f) && logits[t] > m) m = logits[t];
  if (!std::isfinite(m)) {  // nothing weighs anything: every token at the floor
    out.logprob = kLogprobFloor;
    for (TokenId t = 0; t < logits.size() && out.top.size() < top; ++t)
      if (allowed(t, f)) out.top.push_back({t, kLogprobFloor});
    return out;
  }
  // Weights exp(logit - m) as the draw computes them at temperature 1 (0 below e^-87).
  double sum = 0;
  for (TokenId t = 0; t < logits.size(); ++t) {
    if (!allowed(t, f)) continue;
    const float z = logits[t] - m;  // NaN - m is NaN: fails the test below, weighs 0
    if (z >= -87.0f) sum += kernels::exp_det(z);
  }
  const double lse = log_det(sum);  // sum >= 1: the top token weighs exactly 1
  auto logprob = [&](TokenId t) {
    const float l = logits[t];
    return std::isnan(l) ? kLogprobFloor : clamp(double(l - m) - lse);
  };
  out.logprob = chosen < logits.size() ? logprob(chosen) : kLogprobFloor;
  if (top == 0) return out;
  // The `top` best by (logit, id): a sorted array, each token compared with its last entry only, mostly.
  out.top.reserve(top);
  std::vector<float> best;  // the logits of out.top, NaN as -inf
  best.reserve(top + 1);
  for (TokenId t = 0; t < logits.size(); ++t) {
    if (!allowed(t, f)) continue;
    const float l = std::isnan(logits[t]) ? -INFINITY : logits[t];
    if (best.size() == top && !before(l, t, best.back(), out.top.back().id)) continue;
    size_t at = best.size();
    while (at > 0 && before(l, t, best[at - 1], out.top[at - 1].id)) --at;
    best.insert(best.begin() + at, l);
    out.top.insert(out.top.begin() + at, TopLogprob{t, 0});
    if (best.size() > top) {
      best.pop_back();
      out.top.pop_back();
    }
  }
  for (TopLogprob& e : out.top) e.logprob = logprob(e.id);
  return out;
}

}  // namespace epd::model
