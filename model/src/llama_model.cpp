// The Llama-family runner: pre-norm blocks of RMSNorm -> GQA attention with RoPE over the paged KV cache
// -> RMSNorm -> SwiGLU, final RMSNorm and the LM head (tied to the embeddings when the checkpoint has none).
//
// Prefill multiplies through OpenBLAS sgemm (single-threaded calls, one per thread's block of output
// columns). Decode multiplies with epd's fixed-order dot product (kernels.hpp): every output element is the
// same sequence of operations whatever the batch, so a sequence decoded in a batch gets exactly the bits it
// gets alone. Threads split output columns (matmuls) or (row, kv head) pairs (attention), never a sum, so
// the thread count does not change results.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "epd/model/llama.hpp"
#include "kernels.hpp"
#include "llama_weights.hpp"
#include "thread_pool.hpp"

namespace epd::model {
namespace {

namespace k = kernels;
using protocol::ErrorCode;
using protocol::make_error;

protocol::Error invalid(std::string detail) {
  return make_error(ErrorCode::invalid_request, std::move(detail));
}

protocol::Status check_pages(const KvLayout& l, std::span<const PageId> pages, uint64_t end) {
  const uint64_t need = pages_for(l, end);
  if (need > pages.size())
    return invalid("sequence needs " + std::to_string(need) + " KV pages, page table has " +
                   std::to_string(pages.size()));
  for (uint64_t i = 0; i < need; ++i)
    if (pages[i] >= l.num_pages)
      return invalid("KV page index " + std::to_string(pages[i]) + " outside pool of " +
                     std::to_string(l.num_pages) + " pages");
  return {};
}

struct RowTarget {
  std::span<const PageId> pages;
  uint32_t pos;
};

// Per-thread attention scratch.
struct Scratch {
  std::vector<float> scores, conv;
};

class LlamaModel final : public LlamaRunner {
 public:
  LlamaModel(const ModelConfig& cfg, LlamaWeights w)
      : cfg_(cfg), w_(std::move(w)), threads_(cfg.threads), scratch_(cfg.threads) {
    // Our threads split the work; each sgemm call is single-threaded.
    openblas_set_num_threads(1);
    build_rope_table();
  }

  const ModelConfig& config() const override { return cfg_; }
  std::span<const float> last_logits() const override { return logits_; }
  void keep_all_logits(bool on) override { keep_all_ = on; }

  protocol::Result<Embeddings> encode(const Image&) override {
    return invalid("model " + cfg_.name +
                   " is a text-only checkpoint: it has no vision tower, images are "
                   "not supported");
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
    if (!chunk.embeddings.empty()) return invalid("model " + cfg_.name + " takes no image embeddings");
    if (auto st = validate(chunk.sampling); !st) return st.error();

    x_.resize(n * d);
    targets_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&x_[i * d], &w_.tok_emb[size_t{chunk.tokens[i]} * d], d * sizeof(float));
      targets_[i] = RowTarget{pages, static_cast<uint32_t>(start + i)};
    }
    forward(pool, n, /*prefill=*/true);
    const size_t first = keep_all_ ? 0 : n - 1;
    compute_logits(&x_[first * d], n - first);
    return sample_token(std::span(logits_).subspan((n - 1 - first) * cfg_.vocab, cfg_.vocab), chunk.sampling,
                        0, TokenFilter::none);
  }

  protocol::Status decode_step(const KvPool& pool, std::span<const DecodeSeq> batch,
                               std::span<TokenId> next) override {
    if (auto st = check_pool(cfg_, pool); !st) return st;
    if (next.size() < batch.size()) return invalid("decode output span smaller than batch");
    if (batch.empty()) return {};
    const size_t n = batch.size(), d = cfg_.d_model;
    for (const DecodeSeq& s : batch) {
      if (s.length + uint64_t{1} > cfg_.max_seq) return invalid("sequence reached max_seq");
      if (s.last_token >= cfg_.vocab)
        return invalid("decode input token " + std::to_string(s.last_token) + " outside vocab");
      if (auto st = check_pages(pool.layout, s.pages, uint64_t{s.length} + 1); !st) return st;
      if (auto st = validate(s.sampling); !st) return st;
    }
    x_.resize(n * d);
    targets_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&x_[i * d], &w_.tok_emb[size_t{batch[i].last_token} * d], d * sizeof(float));
      targets_[i] = RowTarget{batch[i].pages, batch[i].length};
    }
    forward(pool, n, /*prefill=*/false);
    compute_logits(x_.data(), n);
    for (size_t i = 0; i < n; ++i)
      next[i] = sample_token(std::span(logits_).subspan(i * cfg_.vocab, cfg_.vocab), batch[i].sampling,
                             batch[i].generated, TokenFilter::none);
    return {};
  }

 private:
  void build_rope_table() {
    const size_t half = cfg_.head_dim / 2;
    rope_cos_.resize(size_t{cfg_.max_seq} * half);
    rope_sin_.resize(size_t{cfg_.max_seq} * half);
    for (size_t pos = 0; pos < cfg_.max_seq; ++pos)
      for (size_t i = 0; i < half; ++i) {
        const double freq = std::pow(double{cfg_.rope_theta}, -2.0 * double(i) / double(cfg_.head_dim));
        const double a = double(pos) * freq;
        rope_cos_[pos * half + i] = static_cast<float>(std::cos(a));
        rope_sin_[pos * half + i] = static_cast<float>(std::sin(a));
      }
  }

  // y (rows x out) = x (rows x in) * w^T, w out x in. Prefill: sgemm per thread's column block; decode: the
  // fixed-order kernel.
  void matmul(const float* x, size_t rows, size_t in, const std::vector<float>& w, size_t out, float* y,
              bool prefill) {
    threads_.run(out, [&](size_t b, size_t e, unsigned) {
      if (b == e) return;
      if (prefill)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(e - b),
                    static_cast<int>(in), 1.0f, x, static_cast<int>(in), w.data() + b * in,
                    static_cast<int>(in), 0.0f, y + b, static_cast<int>(out));
      else
        k::matmul_cols(x, rows, in, w.data(), b, e, y, out);
    });
  }

  void forward(const KvPool& pool, size_t n, bool prefill) {
    const size_t d = cfg_.d_model, hd = cfg_.head_dim, q_dim = size_t{cfg_.heads} * hd,
                 kv_dim = size_t{cfg_.kv_heads} * hd, half = hd / 2, f = cfg_.ffn;
    const KvView kv(pool);
    h_.resize(n * d);
    q_.resize(n * q_dim);
    k_.resize(n * kv_dim);
    v_.resize(n * kv_dim);
    attn_.resize(n * q_dim);
    gate_.resize(n * f);
    up_.resize(n * f);
    proj_.resize(n * d);
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const uint32_t ps = pool.layout.page_size;

    for (uint32_t layer = 0; layer < cfg_.layers; ++layer) {
      const LlamaLayer& b = w_.layers[layer];
      for (size_t r = 0; r < n; ++r) k::rmsnorm(&x_[r * d], b.attn_norm.data(), d, cfg_.norm_eps, &h_[r * d]);
      matmul(h_.data(), n, d, b.wq, q_dim, q_.data(), prefill);
      matmul(h_.data(), n, d, b.wk, kv_dim, k_.data(), prefill);
      matmul(h_.data(), n, d, b.wv, kv_dim, v_.data(), prefill);
      for (size_t r = 0; r < n; ++r) {
        const uint32_t pos = targets_[r].pos;
        const float* c = &rope_cos_[pos * half];
        const float* s = &rope_sin_[pos * half];
        for (uint32_t hq = 0; hq < cfg_.heads; ++hq) {
          float* qh = &q_[r * q_dim + hq * hd];
          k::rope(qh, c, s, hd);
          for (size_t i = 0; i < hd; ++i) qh[i] *= q_scale;
        }
        for (uint32_t hk = 0; hk < cfg_.kv_heads; ++hk) k::rope(&k_[r * kv_dim + hk * hd], c, s, hd);
        const PageId page = targets_[r].pages[pos / ps];
        kv.store(layer, 0, page, pos % ps, &k_[r * kv_dim]);
        kv.store(layer, 1, page, pos % ps, &v_[r * kv_dim]);
      }
      threads_.run(n * cfg_.kv_heads, [&](size_t b0, size_t e0, unsigned t) {
        for (size_t i = b0; i < e0; ++i) {
          const size_t r = i / cfg_.kv_heads;
          attend(kv, layer, targets_[r], static_cast<uint32_t>(i % cfg_.kv_heads), &q_[r * q_dim],
                 &attn_[r * q_dim], scratch_[t]);
        }
      });
      matmul(attn_.data(), n, q_dim, b.wo, d, proj_.data(), prefill);
      for (size_t i = 0; i < n * d; ++i) x_[i] += proj_[i];

      for (size_t r = 0; r < n; ++r) k::rmsnorm(&x_[r * d], b.ffn_norm.data(), d, cfg_.norm_eps, &h_[r * d]);
      matmul(h_.data(), n, d, b.w_gate, f, gate_.data(), prefill);
      matmul(h_.data(), n, d, b.w_up, f, up_.data(), prefill);
      k::swiglu(gate_.data(), up_.data(), n * f);
      matmul(gate_.data(), n, f, b.w_down, d, proj_.data(), prefill);
      for (size_t i = 0; i < n * d; ++i) x_[i] += proj_[i];
    }
    for (size_t r = 0; r < n; ++r) {
      k::rmsnorm(&x_[r * d], w_.final_norm.data(), d, cfg_.norm_eps, &h_[r * d]);
      std::memcpy(&x_[r * d], &h_[r * d], d * sizeof(float));
    }
  }

  // Causal attention of one row's query heads of kv head g over positions [0, pos], read from the pool.
  void attend(const KvView& kv, uint32_t layer, const RowTarget& t, uint32_t g, const float* q, float* out,
              Scratch& sc) {
    const size_t hd = cfg_.head_dim, len = size_t{t.pos} + 1, group = cfg_.heads / cfg_.kv_heads;
    const uint32_t ps = kv.layout().page_size;
    sc.scores.resize(group * len);
    sc.conv.resize(hd);
    float* scores = sc.scores.data();
    const float* qg = q + size_t{g} * group * hd;
    for (size_t p = 0; p < len; ++p) {
      const float* kp = kv.load(layer, 0, t.pages[p / ps], p % ps, g, sc.conv.data());
      for (size_t j = 0; j < group; ++j) scores[j * len + p] = k::dot(qg + j * hd, kp, hd);
    }
    float* og = out + size_t{g} * group * hd;
    std::fill(og, og + group * hd, 0.0f);
    for (size_t j = 0; j < group; ++j) {
      float* s = &scores[j * len];
      float m = s[0];
      for (size_t p = 1; p < len; ++p) m = std::max(m, s[p]);
      for (size_t p = 0; p < len; ++p) s[p] = k::exp_det(s[p] - m);
    }
    for (size_t p = 0; p < len; ++p) {
      const float* vp = kv.load(layer, 1, t.pages[p / ps], p % ps, g, sc.conv.data());
      for (size_t j = 0; j < group; ++j) k::axpy(scores[j * len + p], vp, og + j * hd, hd);
    }
    for (size_t j = 0; j < group; ++j) {
      const float inv = 1.0f / k::sum(&scores[j * len], len);
      for (size_t i = 0; i < hd; ++i) og[j * hd + i] *= inv;
    }
  }

  // LM head over `rows` final hidden states (the fixed-order kernel, so logits never depend on the batch).
  void compute_logits(const float* h, size_t rows) {
    const std::vector<float>& head = w_.lm_head.empty() ? w_.tok_emb : w_.lm_head;
    logits_.resize(rows * cfg_.vocab);
    matmul(h, rows, cfg_.d_model, head, cfg_.vocab, logits_.data(), false);
  }

  ModelConfig cfg_;
  LlamaWeights w_;
  ThreadPool threads_;
  std::vector<Scratch> scratch_;
  bool keep_all_ = false;
  std::vector<float> rope_cos_, rope_sin_;
  std::vector<RowTarget> targets_;
  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_, proj_, logits_;
};

}  // namespace

protocol::Result<std::unique_ptr<LlamaRunner>> make_llama_runner(const ModelConfig& cfg) {
  if (cfg.checkpoint.empty()) return make_error(ErrorCode::config_error, "model config names no checkpoint");
  if (auto st = validate(cfg); !st) return st.error();
  auto w = load_llama_weights(cfg);
  if (!w) return w.error();
  return std::unique_ptr<LlamaRunner>(std::make_unique<LlamaModel>(cfg, std::move(*w)));
}

protocol::Result<std::unique_ptr<ModelRunner>> make_runner(const ModelConfig& cfg) {
  if (cfg.checkpoint.empty()) return make_reference_runner(cfg);
  auto r = make_llama_runner(cfg);
  if (!r) return r.error();
  return std::unique_ptr<ModelRunner>(std::move(*r));
}

}  // namespace epd::model
