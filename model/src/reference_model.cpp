// The seeded reference transformer: vision encoder + decoder-only LM over a caller-owned paged KV cache.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "epd/model/runner.hpp"
#include "kernels.hpp"
#include "paged_attention.hpp"
#include "weights.hpp"

namespace epd::model {
namespace {

namespace k = kernels;
using detail::check_pages;
using detail::RowTarget;
using protocol::ErrorCode;
using protocol::make_error;

protocol::Error invalid(std::string detail) {
  return make_error(ErrorCode::invalid_request, std::move(detail));
}

class ReferenceModel final : public ModelRunner {
 public:
  explicit ReferenceModel(const ModelConfig& cfg) : cfg_(cfg), w_(make_weights(cfg)), rope_(cfg) {}

  const ModelConfig& config() const override { return cfg_; }

  protocol::Result<Embeddings> encode(const Image& img) override {
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
    for (const BlockWeights& b : w_.enc_blocks) encoder_block(b, x.data(), n);

    Embeddings e{static_cast<uint32_t>(n), static_cast<uint32_t>(d), std::vector<float>(n * d)};
    std::vector<float> h(d);
    for (size_t r = 0; r < n; ++r) {
      k::rmsnorm(&x[r * d], w_.enc_norm.data(), d, cfg_.norm_eps, h.data());
      k::matmul(h.data(), 1, d, w_.enc_out.data(), d, &e.data[r * d]);
    }
    return e;
  }

  protocol::Result<TokenId> prefill_chunk(const KvPool& pool, std::span<const PageId> pages, uint32_t start,
                                          const PrefillChunk& chunk) override {
    if (auto st = check_pool(cfg_, pool); !st) return st.error();
    const size_t n = chunk.tokens.size(), d = cfg_.d_model;
    if (n == 0) return invalid("empty prefill chunk");
    if (uint64_t{start} + n > cfg_.max_seq)
      return invalid("prefill reaches position " + std::to_string(uint64_t{start} + n) + " > max_seq " +
                     std::to_string(cfg_.max_seq));
    if (auto st = check_pages(pool.layout, pages, uint64_t{start} + n); !st) return st.error();
    for (TokenId t : chunk.tokens)
      if (t >= cfg_.vocab) return invalid("token id " + std::to_string(t) + " outside vocab");
    const uint64_t n_img = count_image_tokens(chunk.tokens);
    if (auto st = validate(chunk.sampling); !st) return st.error();
    if (chunk.embeddings.size() != n_img * d)
      return invalid("chunk has " + std::to_string(n_img) + " image tokens but " +
                     std::to_string(chunk.embeddings.size()) + " embedding floats (d_model " +
                     std::to_string(d) + ")");
    for (float v : chunk.embeddings)
      if (!std::isfinite(v) || std::fabs(v) > 1e6f)
        return invalid("image embedding not finite or out of range");

    x_.resize(n * d);
    targets_.resize(n);
    size_t img_row = 0;
    for (size_t i = 0; i < n; ++i) {
      const TokenId t = chunk.tokens[i];
      const float* src = t == kImage ? &chunk.embeddings[img_row++ * d] : &w_.tok_emb[size_t{t} * d];
      std::memcpy(&x_[i * d], src, d * sizeof(float));
      targets_[i] = RowTarget{pages, static_cast<uint32_t>(start + i)};
    }
    forward(pool, n);
    return sample_token(logits(&x_[(n - 1) * d]), chunk.sampling, 0);
  }

  protocol::Status decode_step(const KvPool& pool, std::span<const DecodeSeq> batch,
                               std::span<TokenId> next) override {
    if (auto st = check_pool(cfg_, pool); !st) return st;
    if (next.size() < batch.size()) return invalid("decode output span smaller than batch");
    if (batch.empty()) return {};
    const size_t n = batch.size(), d = cfg_.d_model;
    for (const DecodeSeq& s : batch) {
      if (s.length + uint64_t{1} > cfg_.max_seq) return invalid("sequence reached max_seq");
      if (s.last_token >= cfg_.vocab || s.last_token == kImage)
        return invalid("decode input token " + std::to_string(s.last_token) + " is not a text token");
      if (auto st = check_pages(pool.layout, s.pages, uint64_t{s.length} + 1); !st) return st;
      if (auto st = validate(s.sampling); !st) return st;
    }
    x_.resize(n * d);
    targets_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&x_[i * d], &w_.tok_emb[size_t{batch[i].last_token} * d], d * sizeof(float));
      targets_[i] = RowTarget{batch[i].pages, batch[i].length};
    }
    forward(pool, n);
    for (size_t i = 0; i < n; ++i)
      next[i] = sample_token(logits(&x_[i * d]), batch[i].sampling, batch[i].generated);
    return {};
  }

 private:
  // Runs the LM over the n rows in x_ (inputs at targets_), writing each row's K/V into its pages before
  // attention. Leaves the final hidden states in x_. Every row is computed with the same sequence of
  // operations whatever n is: that is what makes chunked prefill and batched decode bit-exact.
  void forward(const KvPool& pool, size_t n) {
    const size_t d = cfg_.d_model, hd = cfg_.head_dim, q_dim = size_t{cfg_.heads} * hd,
                 kv_dim = size_t{cfg_.kv_heads} * hd;
    const KvView kv(pool);
    h_.resize(n * d);
    q_.resize(n * q_dim);
    k_.resize(n * kv_dim);
    v_.resize(n * kv_dim);
    attn_.resize(n * q_dim);
    gate_.resize(n * cfg_.ffn);
    up_.resize(n * cfg_.ffn);
    proj_.resize(n * d);

    for (uint32_t layer = 0; layer < cfg_.layers; ++layer) {
      const BlockWeights& b = w_.blocks[layer];
      for (size_t r = 0; r < n; ++r) k::rmsnorm(&x_[r * d], b.attn_norm.data(), d, cfg_.norm_eps, &h_[r * d]);
      k::matmul(h_.data(), n, d, b.wq.data(), q_dim, q_.data());
      k::matmul(h_.data(), n, d, b.wk.data(), kv_dim, k_.data());
      k::matmul(h_.data(), n, d, b.wv.data(), kv_dim, v_.data());
      for (size_t r = 0; r < n; ++r)
        detail::rope_and_store(cfg_, rope_, kv, layer, targets_[r], &q_[r * q_dim], &k_[r * kv_dim],
                               &v_[r * kv_dim]);
      for (size_t r = 0; r < n; ++r) attend(kv, layer, targets_[r], &q_[r * q_dim], &attn_[r * q_dim]);
      k::matmul(attn_.data(), n, q_dim, b.wo.data(), d, proj_.data());
      for (size_t i = 0; i < n * d; ++i) x_[i] += proj_[i];
      mlp(b, x_.data(), n);
    }
    for (size_t r = 0; r < n; ++r) {
      k::rmsnorm(&x_[r * d], w_.final_norm.data(), d, cfg_.norm_eps, &h_[r * d]);
      std::memcpy(&x_[r * d], &h_[r * d], d * sizeof(float));
    }
  }

  // Causal attention of one row over positions [0, pos] of its sequence, read back from the pool.
  // Each K/V vector is loaded once per kv head and used by all query heads of its group; per query head
  // the operations (dot per position, max, exp, fixed-order sum, axpy in position order) never change.
  void attend(const KvView& kv, uint32_t layer, const RowTarget& t, const float* q, float* out) {
    for (uint32_t g = 0; g < cfg_.kv_heads; ++g)
      detail::attend_group(cfg_, kv, layer, t, g, q, out, scratch_);
  }

  // x += W_down(silu(W_gate h) * W_up h), h = rmsnorm(x)
  void mlp(const BlockWeights& b, float* x, size_t n) {
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
  void encoder_block(const BlockWeights& b, float* x, size_t n) {
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

  // lm_head over one final hidden state; sample_token() picks from them (BOS/IMAGE are never generated).
  std::span<const float> logits(const float* h) {
    logits_.resize(cfg_.vocab);
    k::matmul(h, 1, cfg_.d_model, w_.lm_head.data(), cfg_.vocab, logits_.data());
    return logits_;
  }

  ModelConfig cfg_;
  Weights w_;
  detail::RopeTable rope_;
  detail::AttentionScratch scratch_;
  // Scratch only: nothing here survives a call or describes a sequence.
  std::vector<RowTarget> targets_;
  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_, proj_, scores_, logits_;
};

}  // namespace

PrefillChunk slice_prompt(std::span<const TokenId> prompt, std::span<const float> embeddings, uint32_t dim,
                          uint32_t begin, uint32_t end) {
  begin = std::min<uint32_t>(begin, prompt.size());
  end = std::clamp<uint32_t>(end, begin, prompt.size());
  const size_t before = count_image_tokens(prompt.subspan(0, begin));
  const auto toks = prompt.subspan(begin, end - begin);
  const size_t inside = count_image_tokens(toks);
  const size_t lo = std::min(before * dim, embeddings.size());
  const size_t len = std::min(inside * dim, embeddings.size() - lo);
  return PrefillChunk{toks, embeddings.subspan(lo, len)};
}

protocol::Result<std::unique_ptr<ModelRunner>> make_reference_runner(const ModelConfig& cfg) {
  if (auto st = validate(cfg); !st) return st.error();
  return std::unique_ptr<ModelRunner>(std::make_unique<ReferenceModel>(cfg));
}

}  // namespace epd::model
