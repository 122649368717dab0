// The reference model's vision encoder (docs/model.md, "Architecture"): patches of the image, a linear
// projection plus row and column position embeddings, bidirectional pre-norm blocks, a final norm and an
// output projection: one embedding row of d_model floats per patch, which prefill puts at the prompt's IMAGE
// positions. Seeded weights, fixed-order kernels: the same bits everywhere.
#include "reference/vision_toy.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.hpp"

namespace epd::model::detail {
namespace {

namespace k = kernels;

protocol::Error invalid(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(detail));
}

}  // namespace

VisionToy::VisionToy(const ModelConfig& cfg, VisionWeights w) : cfg_(cfg), w_(std::move(w)) {}

protocol::Result<Embeddings> VisionToy::encode(const Image& img) {
  if (img.width == 0 || img.height == 0 || img.rgb.size() != uint64_t{img.width} * img.height * 3)
    return invalid("image buffer does not match its size");
  const uint64_t n = image_token_count(cfg_, {img.width, img.height});
  if (n > cfg_.max_image_patches)
    return invalid("image needs " + std::to_string(n) + " patches, model allows " +
                   std::to_string(cfg_.max_image_patches));
  const uint32_t p = cfg_.patch_size, gw = (img.width + p - 1) / p, gh = (img.height + p - 1) / p;
  const size_t d = cfg_.d_model, patch_dim = size_t{p} * p * 3;

  // Patchify: pixels to [-1, 1], zero (mid-grey) padding past the image edge.
  std::vector<float> patches(n * patch_dim, 0.0f);
  for (uint32_t gy = 0; gy < gh; ++gy)
    for (uint32_t gx = 0; gx < gw; ++gx) {
      float* dst = &patches[(size_t{gy} * gw + gx) * patch_dim];
      for (uint32_t y = 0; y < p; ++y)
        for (uint32_t x = 0; x < p; ++x) {
          const uint32_t iy = gy * p + y, ix = gx * p + x;
          if (iy >= img.height || ix >= img.width) continue;
          const uint8_t* px = &img.rgb[(size_t{iy} * img.width + ix) * 3];
          for (int c = 0; c < 3; ++c) dst[(y * p + x) * 3 + c] = static_cast<float>(px[c]) / 127.5f - 1.0f;
        }
    }
  std::vector<float> x(n * d);
  k::matmul(patches.data(), n, patch_dim, w_.patch_proj.data(), d, x.data());
  for (uint32_t gy = 0; gy < gh; ++gy)
    for (uint32_t gx = 0; gx < gw; ++gx) {
      float* row = &x[(size_t{gy} * gw + gx) * d];
      for (size_t i = 0; i < d; ++i) row[i] += w_.row_pos[gy * d + i] + w_.col_pos[gx * d + i];
    }
  for (const BlockWeights& b : w_.blocks) encoder_block(b, x.data(), n);

  Embeddings e{static_cast<uint32_t>(n), static_cast<uint32_t>(d), std::vector<float>(n * d)};
  std::vector<float> h(d);
  for (size_t r = 0; r < n; ++r) {
    k::rmsnorm(&x[r * d], w_.norm.data(), d, cfg_.norm_eps, h.data());
    k::matmul(h.data(), 1, d, w_.out.data(), d, &e.data[r * d]);
  }
  return e;
}

// x += W_down(silu(W_gate h) * W_up h), h = rmsnorm(x)
void VisionToy::mlp(const BlockWeights& b, float* x, size_t n) {
  const size_t d = cfg_.d_model, f = cfg_.ffn;
  h_.resize(n * d);
  gate_.resize(n * f);
  up_.resize(n * f);
  proj_.resize(n * d);
  for (size_t r = 0; r < n; ++r) k::rmsnorm(&x[r * d], b.mlp_norm.data(), d, cfg_.norm_eps, &h_[r * d]);
  k::matmul(h_.data(), n, d, b.w_gate.data(), f, gate_.data());
  k::matmul(h_.data(), n, d, b.w_up.data(), f, up_.data());
  k::swiglu(gate_.data(), up_.data(), n * f);
  k::matmul(gate_.data(), n, f, b.w_down.data(), d, proj_.data());
  for (size_t i = 0; i < n * d; ++i) x[i] += proj_[i];
}

// Bidirectional multi-head attention over the n patches (no KV cache), then the MLP.
void VisionToy::encoder_block(const BlockWeights& b, float* x, size_t n) {
  const size_t d = cfg_.d_model, hd = cfg_.head_dim, qd = size_t{cfg_.heads} * hd;
  h_.resize(n * d);
  q_.resize(n * qd);
  k_.resize(n * qd);
  v_.resize(n * qd);
  attn_.resize(n * qd);
  proj_.resize(n * d);
  scores_.resize(n);
  for (size_t r = 0; r < n; ++r) k::rmsnorm(&x[r * d], b.attn_norm.data(), d, cfg_.norm_eps, &h_[r * d]);
  k::matmul(h_.data(), n, d, b.wq.data(), qd, q_.data());
  k::matmul(h_.data(), n, d, b.wk.data(), qd, k_.data());
  k::matmul(h_.data(), n, d, b.wv.data(), qd, v_.data());
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (size_t r = 0; r < n; ++r)
    for (uint32_t hq = 0; hq < cfg_.heads; ++hq) {
      const float* qh = &q_[r * qd + hq * hd];
      float m = -INFINITY;
      for (size_t p = 0; p < n; ++p) {
        scores_[p] = k::dot(qh, &k_[p * qd + hq * hd], hd) * q_scale;
        m = std::max(m, scores_[p]);
      }
      for (size_t p = 0; p < n; ++p) scores_[p] = k::exp_det(scores_[p] - m);
      const float inv = 1.0f / k::sum(scores_.data(), n);
      float* oh = &attn_[r * qd + hq * hd];
      std::fill(oh, oh + hd, 0.0f);
      for (size_t p = 0; p < n; ++p) k::axpy(scores_[p], &v_[p * qd + hq * hd], oh, hd);
      for (size_t i = 0; i < hd; ++i) oh[i] *= inv;
    }
  k::matmul(attn_.data(), n, qd, b.wo.data(), d, proj_.data());
  for (size_t i = 0; i < n * d; ++i) x[i] += proj_[i];
  mlp(b, x, n);
}

}  // namespace epd::model::detail
