#include "reference/reference_weights.hpp"

#include <cmath>

#include "epd/model/rng.hpp"

namespace epd::model::detail {
namespace {

// Tensor tags: (group << 32) | (layer << 8) | slot. Each tensor has its own SplitMix64 stream, so a
// tensor's values do not depend on which other tensors exist.
enum Group : uint64_t { kLm = 1, kLmBlock = 2, kEnc = 3, kEncBlock = 4 };

uint64_t tag(Group g, uint64_t layer, uint64_t slot) {
  return (uint64_t{g} << 32) | (layer << 8) | slot;
}

// Uniform in [-a, a) with a = gain * sqrt(3 / fan_in): variance gain^2 / fan_in.
std::vector<float> uniform(uint64_t seed, uint64_t t, size_t n, size_t fan_in, float gain) {
  SplitMix64 rng = tensor_stream(seed, t);
  const float a = gain * static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)));
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform_pm1() * a;
  return v;
}

// Norm gains near 1 (not exactly 1, so the gain vectors matter and are checked by the tests too).
std::vector<float> gains(uint64_t seed, uint64_t t, size_t n) {
  SplitMix64 rng = tensor_stream(seed, t);
  std::vector<float> v(n);
  for (float& x : v) x = 1.0f + 0.1f * rng.uniform_pm1();
  return v;
}

BlockWeights block(const ModelConfig& c, uint64_t seed, Group g, uint32_t layer, uint32_t kv_heads,
                   uint32_t depth) {
  const size_t d = c.d_model, q = size_t{c.heads} * c.head_dim, kv = size_t{kv_heads} * c.head_dim;
  // Sharp attention (q/k gain 2) with a strong output (gain 2) makes the output depend on the context,
  // not just on the current token: a wrong or corrupted KV page then shows up in the tokens.
  // The MLP branch is damped by depth so the residual stream grows slowly.
  const float qk_gain = 2.0f, attn_out_gain = 2.0f;
  const float out_gain = 1.0f / std::sqrt(2.0f * static_cast<float>(depth));
  BlockWeights b;
  b.attn_norm = gains(seed, tag(g, layer, 0), d);
  b.wq = uniform(seed, tag(g, layer, 1), q * d, d, qk_gain);
  b.wk = uniform(seed, tag(g, layer, 2), kv * d, d, qk_gain);
  b.wv = uniform(seed, tag(g, layer, 3), kv * d, d, 1.0f);
  b.wo = uniform(seed, tag(g, layer, 4), d * q, q, attn_out_gain);
  b.mlp_norm = gains(seed, tag(g, layer, 5), d);
  b.w_gate = uniform(seed, tag(g, layer, 6), c.ffn * d, d, 1.0f);
  b.w_up = uniform(seed, tag(g, layer, 7), c.ffn * d, d, 1.0f);
  b.w_down = uniform(seed, tag(g, layer, 8), d * c.ffn, c.ffn, out_gain);
  return b;
}

}  // namespace

ReferenceWeights make_weights(const ModelConfig& c) {
  const uint64_t s = c.seed;
  const size_t d = c.d_model, v = c.vocab;
  ReferenceWeights w;
  // Small token embeddings (uniform in +-0.35) so attention output is comparable to them.
  w.tok_emb = uniform(s, tag(kLm, 0, 0), v * d, 1, 0.2f);
  w.final_norm = gains(s, tag(kLm, 0, 1), d);
  // A larger head gain sharpens the logits: greedy choice depends on context more than on ties.
  w.lm_head = uniform(s, tag(kLm, 0, 2), v * d, d, 4.0f);
  for (uint32_t l = 0; l < c.layers; ++l) w.blocks.push_back(block(c, s, kLmBlock, l, c.kv_heads, c.layers));
  return w;
}

VisionWeights make_vision_weights(const ModelConfig& c) {
  const uint64_t s = c.seed;
  const size_t d = c.d_model, patch_dim = size_t{c.patch_size} * c.patch_size * 3;
  VisionWeights vis;
  vis.patch_proj = uniform(s, tag(kEnc, 0, 0), d * patch_dim, patch_dim, 1.0f);
  vis.row_pos = uniform(s, tag(kEnc, 0, 1), size_t{c.max_image_patches} * d, 1, 0.3f);
  vis.col_pos = uniform(s, tag(kEnc, 0, 2), size_t{c.max_image_patches} * d, 1, 0.3f);
  for (uint32_t l = 0; l < c.encoder_layers; ++l)
    vis.blocks.push_back(block(c, s, kEncBlock, l, c.heads, c.encoder_layers));
  vis.norm = gains(s, tag(kEnc, 0, 3), d);
  vis.out = uniform(s, tag(kEnc, 0, 4), d * d, d, 1.0f);
  return vis;
}

}  // namespace epd::model::detail
