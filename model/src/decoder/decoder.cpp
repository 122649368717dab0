// The decoder (decoder.hpp). Matrices multiply through detail::Matmul (kernels/weight_matrix.hpp), attention
// goes through attention/: the reference model's fixed-order kernels with Arithmetic::exact, ggml's and
// blocked attention with Arithmetic::fast. Threads split output columns (matmuls), rows (norms, RoPE) or
// (row, kv head, segment) items (attention), never a sum, so the thread count does not change results, and
// a sequence decoded in a batch gets exactly the bits it gets alone.
#include "decoder/decoder.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "attention/blocked_attention.hpp"
#include "attention/paged_attention.hpp"
#include "kernels/blas_core.hpp"
#include "kernels/kernels.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/weight_matrix.hpp"

namespace epd::model::detail {
namespace {

namespace k = kernels;
using protocol::ErrorCode;
using protocol::make_error;

protocol::Error invalid(std::string detail) {
  return make_error(ErrorCode::invalid_request, std::move(detail));
}

class Decoder final : public LlamaRunner {
 public:
  Decoder(const ModelConfig& cfg, DecoderWeights w, DecoderOptions opts)
      : cfg_(cfg),
        w_(std::move(w)),
        opts_(std::move(opts)),
        exact_(opts_.arithmetic == Arithmetic::exact),
        threads_(cfg.threads),
        matmul_(threads_, w_.ggml, exact_),
        exact_scratch_(threads_.size()),
        prompt_scratch_(threads_.size()),
        decode_scratch_(threads_.size()),
        rope_(w_.arch.rope, cfg.head_dim, cfg.max_seq),
        q_scale_(w_.arch.attn_scale != 0.0f ? w_.arch.attn_scale
                                            : 1.0f / std::sqrt(static_cast<float>(cfg.head_dim))) {
    if (!w_.arch.swa_layers.empty()) rope_swa_.emplace(w_.arch.rope_swa, cfg.head_dim, cfg.max_seq);
    if (!exact_) {
      // Our threads split the work; each sgemm call is single-threaded, with this CPU's kernels.
      select_blas_core();
      openblas_set_num_threads(1);
    }
  }

  const ModelConfig& config() const override { return cfg_; }
  std::span<const float> last_logits() const override { return logits_; }
  void keep_all_logits(bool on) override { keep_all_ = on; }
  std::string kernels() const override { return describe_kernels(w_); }
  std::span<const float> routing_margins() const override { return routing_margin_; }

  protocol::Result<Embeddings> encode(const Image& image) override {
    if (!opts_.encoder)
      return invalid("model " + cfg_.name +
                     " is a text-only checkpoint: it has no vision tower, images are not supported");
    return opts_.encoder->encode(image);
  }

  protocol::Result<Embeddings> encode_audio(const Audio& audio) override {
    if (!opts_.encoder)
      return invalid("model " + cfg_.name + " is a text-only checkpoint: it has no audio tower");
    return opts_.encoder->encode_audio(audio);
  }

  protocol::Result<TokenId> prefill_chunk(const KvPool& pool, std::span<const PageId> pages, uint32_t start,
                                          const PrefillChunk& chunk) override {
    const PrefillPiece piece{pages, start, chunk};
    return std::move(prefill_batch(pool, {&piece, 1}).front());
  }

  std::vector<protocol::Result<TokenId>> prefill_batch(const KvPool& pool,
                                                       std::span<const PrefillPiece> pieces) override {
    std::vector<protocol::Result<TokenId>> out;
    out.reserve(pieces.size());
    for (const PrefillPiece& p : pieces) {
      auto st = check_piece(pool, p);
      out.push_back(st ? protocol::Result<TokenId>(TokenId{0}) : protocol::Result<TokenId>(st.error()));
    }
    check_page_sharing(pool.layout, pieces, out);
    // The valid pieces' rows, one segment each, in order.
    const size_t d = cfg_.d_model;
    size_t n = 0;
    segments_.clear();
    for (size_t i = 0; i < pieces.size(); ++i)
      if (out[i]) {
        segments_.push_back(pieces[i].chunk.tokens.size());
        n += segments_.back();
      }
    if (n == 0) return out;
    x_.resize(n * d);
    targets_.resize(n);
    sees_to_.clear();
    if (opts_.bidirectional_images && opts_.image_token) sees_to_.resize(n);
    size_t row = 0;
    for (size_t i = 0; i < pieces.size(); ++i)
      if (out[i]) {
        lay_out(pieces[i], row);
        row += pieces[i].chunk.tokens.size();
      }
    forward(pool, n, /*prefill=*/true);
    // Logits of each piece's last row (of every row of a lone chunk, with keep_all_logits), by the decode
    // kernels: they do not depend on which rows are computed together.
    const bool all = keep_all_ && segments_.size() == 1;
    last_rows_.resize(segments_.size() * d);
    if (!all) {
      size_t end = 0;
      for (size_t s = 0; s < segments_.size(); ++s) {
        end += segments_[s];
        std::copy_n(&x_[(end - 1) * d], d, &last_rows_[s * d]);
      }
    }
    compute_logits(all ? x_.data() : last_rows_.data(), all ? n : segments_.size());
    size_t seg = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (!out[i]) continue;
      const PrefillChunk& c = pieces[i].chunk;
      const size_t logit_row = all ? n - 1 : seg++;
      out[i] = sample_constrained(std::span(logits_).subspan(logit_row * cfg_.vocab, cfg_.vocab), c.sampling,
                                  c.generated, opts_.filter, c.history, c.constraint, c.logprobs);
    }
    return out;
  }

  protocol::Status decode_step(const KvPool& pool, std::span<const DecodeSeq> batch, std::span<TokenId> next,
                               std::span<TokenLogprobs> logprobs = {}) override {
    if (auto st = check_pool(cfg_, pool); !st) return st;
    if (next.size() < batch.size()) return invalid("decode output span smaller than batch");
    if (!logprobs.empty() && logprobs.size() < batch.size())
      return invalid("decode logprobs span smaller than batch");
    if (batch.empty()) return {};
    const size_t n = batch.size(), d = cfg_.d_model;
    for (const DecodeSeq& s : batch) {
      if (s.length + uint64_t{1} > cfg_.max_seq) return invalid("sequence reached max_seq");
      if (s.last_token >= cfg_.vocab)
        return invalid("decode input token " + std::to_string(s.last_token) + " outside vocab");
      if (opts_.image_token && s.last_token == *opts_.image_token)
        return invalid("decode input token " + std::to_string(s.last_token) + " is not a text token");
      if (auto st = check_pages(pool.layout, s.pages, uint64_t{s.length} + 1); !st) return st;
      if (s.position_lag > s.length || (s.position_lag != 0 && !cfg_.mrope))
        return invalid("decode position lag " + std::to_string(s.position_lag) + " at length " +
                       std::to_string(s.length) + (cfg_.mrope ? "" : " for a model without M-RoPE"));
      if (auto st = validate(s.sampling); !st) return st;
      if (s.sampling.penalized() && s.history.size() != uint64_t{s.length} + 1)
        return invalid("penalized decode sequence of length " + std::to_string(s.length) + " has " +
                       std::to_string(s.history.size()) + " history tokens");
    }
    x_.resize(n * d);
    targets_.resize(n);
    sees_to_.clear();
    segments_.clear();
    for (size_t i = 0; i < n; ++i) {
      embed(batch[i].last_token, &x_[i * d]);
      const uint32_t p = batch[i].length - batch[i].position_lag;
      targets_[i] = RowTarget{batch[i].pages, batch[i].length, RopePosition{p, p, p, p}};
    }
    forward(pool, n, /*prefill=*/false);
    compute_logits(x_.data(), n);
    for (size_t i = 0; i < n; ++i)
      next[i] = sample_constrained(std::span(logits_).subspan(i * cfg_.vocab, cfg_.vocab), batch[i].sampling,
                                   batch[i].generated, opts_.filter, batch[i].history, batch[i].constraint,
                                   logprobs.empty() ? nullptr : &logprobs[i]);
    return {};
  }

 private:
  using Out = Matmul::Out;

  // Everything prefill_chunk refuses, before any write.
  protocol::Status check_piece(const KvPool& pool, const PrefillPiece& piece) const {
    const PrefillChunk& chunk = piece.chunk;
    const uint32_t start = piece.start;
    if (auto st = check_pool(cfg_, pool); !st) return st;
    const size_t n = chunk.tokens.size();
    if (n == 0) return invalid("empty prefill chunk");
    if (uint64_t{start} + n > cfg_.max_seq)
      return invalid("prefill reaches position " + std::to_string(uint64_t{start} + n) + " > max_seq " +
                     std::to_string(cfg_.max_seq));
    if (auto st = check_pages(pool.layout, piece.pages, uint64_t{start} + n); !st) return st;
    for (TokenId t : chunk.tokens)
      if (t >= cfg_.vocab && !(opts_.image_token && t == *opts_.image_token))
        return invalid("token id " + std::to_string(t) + " outside vocab");
    if (auto st = validate(chunk.sampling); !st) return st;
    // A penalty without the tokens it counts would silently draw something else than every other role.
    if (chunk.sampling.penalized() && chunk.history.size() != uint64_t{start} + n)
      return invalid("penalized prefill chunk ending at " + std::to_string(uint64_t{start} + n) + " has " +
                     std::to_string(chunk.history.size()) + " history tokens");
    if (auto st = check_embeddings(chunk); !st) return st;
    return check_positions(chunk, start);
  }

  // Pieces of one pass may share pages they only read (a cached prefix), never a page one of them writes:
  // its rows would be read while written. The later piece of such a pair is refused.
  static void check_page_sharing(const KvLayout& layout, std::span<const PrefillPiece> pieces,
                                 std::vector<protocol::Result<TokenId>>& out) {
    if (pieces.size() < 2) return;
    std::unordered_map<PageId, size_t> written, read;  // page -> the first piece that writes / reads it
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (!out[i]) continue;
      const PrefillPiece& p = pieces[i];
      const uint32_t first = p.start / layout.page_size,
                     end = uint32_t((uint64_t{p.start} + p.chunk.tokens.size() - 1) / layout.page_size) + 1;
      for (uint32_t l = 0; l < end && out[i]; ++l) {
        std::optional<size_t> other;
        if (auto w = written.find(p.pages[l]); w != written.end())
          other = w->second;
        else if (auto r = read.find(p.pages[l]); r != read.end() && l >= first)
          other = r->second;
        if (!other) continue;
        out[i] = invalid("prefill pieces " + std::to_string(*other) + " and " + std::to_string(i) +
                         " of one pass share page " + std::to_string(p.pages[l]) + ", which one writes");
      }
      if (!out[i]) continue;
      for (uint32_t l = 0; l < end; ++l) (l >= first ? written : read).emplace(p.pages[l], i);
    }
  }

  // A valid piece's rows into x_, targets_ (and sees_to_) from row `first` on.
  void lay_out(const PrefillPiece& piece, size_t first) {
    const PrefillChunk& chunk = piece.chunk;
    const size_t n = chunk.tokens.size(), d = cfg_.d_model;
    size_t img_row = 0;
    for (size_t i = 0; i < n; ++i) {
      const TokenId t = chunk.tokens[i];
      float* x = &x_[(first + i) * d];
      if (opts_.image_token && t == *opts_.image_token)
        std::memcpy(x, &chunk.embeddings[img_row++ * d], d * sizeof(float));
      else
        embed(t, x);
      const auto slot = static_cast<uint32_t>(piece.start + i);
      targets_[first + i] = chunk.positions ? RowTarget{piece.pages, slot, chunk.positions->at(slot)}
                                            : RowTarget{piece.pages, slot};
    }
    // Bidirectional images: a row of an image sees up to its run's last row (the chunk holds the run).
    if (sees_to_.empty()) return;
    for (size_t i = n; i-- > 0;) {
      const bool run_goes_on =
          i + 1 < n && chunk.tokens[i] == *opts_.image_token && chunk.tokens[i + 1] == *opts_.image_token;
      sees_to_[first + i] = run_goes_on ? sees_to_[first + i + 1] : static_cast<uint32_t>(piece.start + i);
    }
  }

  // One embedding row per image token of the chunk, finite and of sane size; none if the model takes none.
  protocol::Status check_embeddings(const PrefillChunk& chunk) const {
    const size_t d = cfg_.d_model;
    if (!opts_.image_token) {
      if (!chunk.embeddings.empty()) return invalid("model " + cfg_.name + " takes no image embeddings");
      return {};
    }
    const uint64_t n_img = std::count(chunk.tokens.begin(), chunk.tokens.end(), *opts_.image_token);
    if (chunk.embeddings.size() != n_img * d)
      return invalid("chunk has " + std::to_string(n_img) + " image tokens but " +
                     std::to_string(chunk.embeddings.size()) + " embedding floats (d_model " +
                     std::to_string(d) + ")");
    for (float v : chunk.embeddings)
      if (!std::isfinite(v) || std::fabs(v) > 1e6f)
        return invalid("image embedding not finite or out of range");
    return {};
  }

  // An M-RoPE model's image rows rotate by their grid: the chunk must carry the prompt's positions, which
  // must place an image row exactly where the chunk has one. Other models take none.
  protocol::Status check_positions(const PrefillChunk& chunk, uint32_t start) const {
    if (!chunk.positions) {
      if (cfg_.mrope && opts_.image_token &&
          std::find(chunk.tokens.begin(), chunk.tokens.end(), *opts_.image_token) != chunk.tokens.end())
        return invalid("model " + cfg_.name + " rotates image rows by M-RoPE: the chunk needs their grids");
      return {};
    }
    if (!cfg_.mrope) return invalid("model " + cfg_.name + " has no M-RoPE: its chunks take no positions");
    for (size_t i = 0; i < chunk.tokens.size(); ++i) {
      const bool image = opts_.image_token && chunk.tokens[i] == *opts_.image_token;
      if (image != chunk.positions->is_image(uint32_t(start + i)))
        return invalid("the prompt's positions place " + std::string(image ? "text" : "an image row") +
                       " at slot " + std::to_string(start + i) + ", where the chunk has " +
                       (image ? "an image row" : "text"));
    }
    return {};
  }

  // A token's embedding row, scaled as the family scales it (image rows are taken as they come).
  void embed(TokenId t, float* out) const {
    w_.tok_emb.row_to_f32(t, out, w_.ggml);
    if (w_.arch.embed_scale != 1.0f)
      for (size_t i = 0; i < cfg_.d_model; ++i) out[i] *= w_.arch.embed_scale;
  }

  // Row r of y (rows of bias.size() values) += bias, when there is one.
  static void add_bias(float* y, const std::vector<float>& bias, size_t r) {
    if (bias.empty()) return;
    float* row = y + r * bias.size();
    for (size_t i = 0; i < bias.size(); ++i) row[i] += bias[i];
  }

  void forward(const KvPool& pool, size_t n, bool prefill) {
    const size_t d = cfg_.d_model, hd = cfg_.head_dim, q_dim = size_t{cfg_.heads} * hd,
                 kv_dim = size_t{cfg_.kv_heads} * hd, f = cfg_.ffn;
    const DecoderArch& arch = w_.arch;
    const KvView kv(pool);
    h_.resize(n * d);
    q_.resize(n * q_dim);
    k_.resize(n * kv_dim);
    v_.resize(n * kv_dim);
    attn_.resize(n * q_dim);
    gate_.resize(n * f);
    up_.resize(n * f);
    proj_.resize(n * d);

    // Per-row steps run over the rows in parallel. Attention is handed out by (row, kv head) to whichever
    // thread is free: in a prompt, later rows attend over more positions.
    auto per_row = [&](auto&& fn) {
      threads_.run(n, [&](size_t b0, size_t e0, unsigned) {
        for (size_t r = b0; r < e0; ++r) fn(r);
      });
    };
    per_row([&](size_t r) {
      k::rmsnorm(&x_[r * d], w_.layers[0].attn_norm.data(), d, cfg_.norm_eps, &h_[r * d]);
    });
    routing_margin_.assign(arch.experts ? n : 0, std::numeric_limits<float>::infinity());
    for (uint32_t layer = 0; layer < cfg_.layers; ++layer) {
      const DecoderLayer& b = w_.layers[layer];
      project_qkv(b, n, prefill);
      const RopeTable& rope = arch.slides(layer) ? *rope_swa_ : rope_;
      per_row([&](size_t r) {
        float *q = &q_[r * q_dim], *kr = &k_[r * kv_dim];
        add_bias(q_.data(), b.wq.bias, r);
        add_bias(k_.data(), b.wk.bias, r);
        add_bias(v_.data(), b.wv.bias, r);
        if (!b.q_norm.empty())
          for (uint32_t h = 0; h < cfg_.heads; ++h)
            k::rmsnorm(q + h * hd, b.q_norm.data(), hd, cfg_.norm_eps, q + h * hd);
        if (!b.k_norm.empty())
          for (uint32_t h = 0; h < cfg_.kv_heads; ++h)
            k::rmsnorm(kr + h * hd, b.k_norm.data(), hd, cfg_.norm_eps, kr + h * hd);
        rope_and_store(cfg_, rope, q_scale_, kv, layer, targets_[r], q, kr, &v_[r * kv_dim]);
      });
      attend(kv, layer, n, prefill, arch.slides(layer) ? arch.sliding_window : 0);
      const Out o[] = {{&b.wo.w, proj_.data()}};
      matmul_.run(attn_.data(), n, q_dim, o, prefill, segments_);
      per_row([&](size_t r) {
        add_bias(proj_.data(), b.wo.bias, r);
        if (!b.attn_post_norm.empty())
          k::rmsnorm(&proj_[r * d], b.attn_post_norm.data(), d, cfg_.norm_eps, &proj_[r * d]);
        for (size_t i = r * d; i < (r + 1) * d; ++i) x_[i] += proj_[i];
        k::rmsnorm(&x_[r * d], b.ffn_norm.data(), d, cfg_.norm_eps, &h_[r * d]);
      });
      if (b.router.w.rows())
        experts(b, n, prefill);
      else
        dense_ffn(b, n, prefill);
      // The residual, and the next norm: the next layer's attention norm, or the final one.
      const bool last = layer + 1 == cfg_.layers;
      const float* norm = last ? w_.final_norm.data() : w_.layers[layer + 1].attn_norm.data();
      per_row([&](size_t r) {
        add_bias(proj_.data(), b.w_down.bias, r);
        if (!b.ffn_post_norm.empty())
          k::rmsnorm(&proj_[r * d], b.ffn_post_norm.data(), d, cfg_.norm_eps, &proj_[r * d]);
        for (size_t i = r * d; i < (r + 1) * d; ++i) x_[i] += proj_[i];
        k::rmsnorm(&x_[r * d], norm, d, cfg_.norm_eps, &h_[r * d]);
        if (last) std::memcpy(&x_[r * d], &h_[r * d], d * sizeof(float));
      });
    }
  }

  // Q, K and V of the n rows in h_ into q_, k_, v_ (biases not yet added): three products, or one fused
  // product split per row.
  void project_qkv(const DecoderLayer& b, size_t n, bool prefill) {
    const size_t d = cfg_.d_model, q_dim = size_t{cfg_.heads} * cfg_.head_dim,
                 kv_dim = size_t{cfg_.kv_heads} * cfg_.head_dim;
    if (!b.wqkv.w.rows()) {
      const Out qkv[] = {{&b.wq.w, q_.data()}, {&b.wk.w, k_.data()}, {&b.wv.w, v_.data()}};
      matmul_.run(h_.data(), n, d, qkv, prefill, segments_);
      return;
    }
    const size_t all = q_dim + 2 * kv_dim;
    fused_.resize(n * all);
    const Out qkv[] = {{&b.wqkv.w, fused_.data()}};
    matmul_.run(h_.data(), n, d, qkv, prefill, segments_);
    threads_.run(n, [&](size_t b0, size_t e0, unsigned) {
      for (size_t r = b0; r < e0; ++r) {
        add_bias(fused_.data(), b.wqkv.bias, r);
        const float* src = &fused_[r * all];
        std::copy_n(src, q_dim, &q_[r * q_dim]);
        std::copy_n(src + q_dim, kv_dim, &k_[r * kv_dim]);
        std::copy_n(src + q_dim + kv_dim, kv_dim, &v_[r * kv_dim]);
      }
    });
  }

  // The gated feed-forward of the n rows in h_ into proj_ (the down projection's bias not yet added).
  void dense_ffn(const DecoderLayer& b, size_t n, bool prefill) {
    const size_t d = cfg_.d_model, f = cfg_.ffn;
    const Activation act = w_.arch.activation;
    if (b.w_gate_up.w.rows()) {  // gate rows, then up rows, in one product
      fused_.resize(n * 2 * f);
      const Out gate_up[] = {{&b.w_gate_up.w, fused_.data()}};
      matmul_.run(h_.data(), n, d, gate_up, prefill, segments_);
    } else {
      const Out gate_up[] = {{&b.w_gate.w, gate_.data()}, {&b.w_up.w, up_.data()}};
      matmul_.run(h_.data(), n, d, gate_up, prefill, segments_);
    }
    threads_.run(n, [&](size_t b0, size_t e0, unsigned) {
      for (size_t r = b0; r < e0; ++r) {
        if (b.w_gate_up.w.rows()) {
          add_bias(fused_.data(), b.w_gate_up.bias, r);
          std::copy_n(&fused_[r * 2 * f], f, &gate_[r * f]);
          std::copy_n(&fused_[r * 2 * f + f], f, &up_[r * f]);
        }
        add_bias(gate_.data(), b.w_gate.bias, r);
        add_bias(up_.data(), b.w_up.bias, r);
        if (act == Activation::gelu_tanh)
          k::geglu_f16_table(&gate_[r * f], &up_[r * f], f);
        else
          k::swiglu(&gate_[r * f], &up_[r * f], f);
      }
    });
    const Out down[] = {{&b.w_down.w, proj_.data()}};
    matmul_.run(gate_.data(), n, f, down, prefill, segments_);
  }

  // The feed-forward of a mixture-of-experts block into proj_, as llama.cpp's build_moe_ffn: the router's
  // softmax over the experts (exp in float, summed in double, scaled by the sum's inverse), each row's
  // experts_used most probable experts, their probabilities (renormalised to sum to 1, the sum clamped at
  // f16's smallest normal, when norm_expert_weights), each chosen expert's SwiGLU, and the weighted outputs
  // summed in rank order. Rows are grouped by expert, so each expert's matrices are read once per step
  // whatever the batch; in decode an expert's rows get the bits each gets alone (as every matrix's rows do,
  // repacked or not: Matmul), so a row's bits do not depend on which other rows chose that expert.
  void experts(const DecoderLayer& b, size_t n, bool prefill) {
    const DecoderArch& arch = w_.arch;
    const size_t d = cfg_.d_model, n_exp = arch.experts, used = arch.experts_used, f = arch.expert_ffn;
    router_.resize(n * n_exp);
    const Out router[] = {{&b.router.w, router_.data()}};
    matmul_.run(h_.data(), n, d, router, prefill, segments_);
    chosen_.resize(n * used);
    chosen_weight_.resize(n * used);
    threads_.run(n, [&](size_t b0, size_t e0, unsigned) {
      std::vector<uint32_t> order(n_exp);
      std::vector<float> logits(n_exp);
      const size_t ranked = std::min(used + 1, n_exp);  // the chosen, and the best one left out
      for (size_t r = b0; r < e0; ++r) {
        add_bias(router_.data(), b.router.bias, r);
        float* p = &router_[r * n_exp];
        std::copy_n(p, n_exp, logits.begin());
        const float m = *std::max_element(p, p + n_exp);
        double sum = 0;
        for (size_t e = 0; e < n_exp; ++e) sum += p[e] = std::exp(p[e] - m);
        const float inv = static_cast<float>(1.0 / sum);
        for (size_t e = 0; e < n_exp; ++e) p[e] *= inv;
        for (uint32_t e = 0; e < n_exp; ++e) order[e] = e;
        std::partial_sort(order.begin(), order.begin() + ranked, order.end(),
                          [&](uint32_t a, uint32_t c) { return p[a] > p[c] || (p[a] == p[c] && a < c); });
        if (used < n_exp) {  // the last expert taken against the best one left out, on the logits
          float largest = 0;
          for (float l : logits) largest = std::max(largest, std::fabs(l));
          routing_margin_[r] = std::min(routing_margin_[r], (logits[order[used - 1]] - logits[order[used]]) /
                                                                std::max(largest, 1e-30f));
        }
        float total = 0;
        for (size_t k = 0; k < used; ++k) {
          chosen_[r * used + k] = order[k];
          chosen_weight_[r * used + k] = p[order[k]];
          total += p[order[k]];
        }
        if (arch.norm_expert_weights)
          for (size_t k = 0; k < used; ++k) chosen_weight_[r * used + k] /= std::max(total, 6.103515625e-5f);
      }
    });
    // Each expert's rows, in row order: gathered, multiplied, scattered to their (row, rank) slot.
    // In a batched prompt an expert's rows of each piece are a segment of their own, as they are alone.
    expert_out_.resize(n * used * d);
    for (uint32_t e = 0; e < n_exp; ++e) {
      slots_.clear();
      expert_segments_.assign(segments_.size(), 0);
      for (size_t i = 0, seg = 0, seg_end = segments_.empty() ? n : segments_[0]; i < n * used; ++i) {
        while (!segments_.empty() && i / used >= seg_end) seg_end += segments_[++seg];
        if (chosen_[i] != e) continue;
        slots_.push_back(i);
        if (!segments_.empty()) ++expert_segments_[seg];
      }
      const size_t m = slots_.size();
      if (m == 0) continue;
      expert_in_.resize(m * d);
      gate_.resize(std::max(gate_.size(), m * f));
      up_.resize(std::max(up_.size(), m * f));
      expert_down_.resize(m * d);
      for (size_t j = 0; j < m; ++j) std::copy_n(&h_[slots_[j] / used * d], d, &expert_in_[j * d]);
      const Out gate_up[] = {{&b.gate_exps[e], gate_.data()}, {&b.up_exps[e], up_.data()}};
      matmul_.run(expert_in_.data(), m, d, gate_up, prefill, expert_segments_);
      threads_.run(m, [&](size_t b0, size_t e0, unsigned) {
        for (size_t j = b0; j < e0; ++j) k::swiglu(&gate_[j * f], &up_[j * f], f);
      });
      const Out down[] = {{&b.down_exps[e], expert_down_.data()}};
      matmul_.run(gate_.data(), m, f, down, prefill, expert_segments_);
      for (size_t j = 0; j < m; ++j) std::copy_n(&expert_down_[j * d], d, &expert_out_[slots_[j] * d]);
    }
    threads_.run(n, [&](size_t b0, size_t e0, unsigned) {
      for (size_t r = b0; r < e0; ++r) {
        float* out = &proj_[r * d];
        for (size_t k = 0; k < used; ++k) {
          const float wk = chosen_weight_[r * used + k];
          const float* x = &expert_out_[(r * used + k) * d];
          for (size_t i = 0; i < d; ++i) out[i] = k == 0 ? x[i] * wk : out[i] + x[i] * wk;
        }
      }
    });
  }

  // Attention of the n rows in q_ into attn_: exact, by attend_group; fast (blocked_attention.hpp), each
  // prompt chunk of several rows by blocks of its rows, every other row (a decode step, a one-token chunk)
  // by segments of its positions: a chunk gets the same bits in a batch as alone.
  void attend(const KvView& kv, uint32_t layer, size_t n, bool prefill, uint32_t window) {
    const size_t q_dim = size_t{cfg_.heads} * cfg_.head_dim;
    if (exact_) {  // the reference kernel, one (row, kv head) at a time
      threads_.run_chunks(n * cfg_.kv_heads, [&](size_t i, unsigned t) {
        const size_t r = i / cfg_.kv_heads;
        attend_group(cfg_, kv, layer, targets_[r], static_cast<uint32_t>(i % cfg_.kv_heads), &q_[r * q_dim],
                     &attn_[r * q_dim], exact_scratch_[t]);
      });
      return;
    }
    alone_rows_.clear();
    prompt_blocks_.clear();
    if (!prefill) {
      for (size_t r = 0; r < n; ++r) alone_rows_.push_back(r);
    } else {
      for (size_t s = 0, first = 0; s < segments_.size(); first += segments_[s++]) {
        if (segments_[s] == 1) alone_rows_.push_back(first);
        for (size_t r0 = 0; segments_[s] > 1 && r0 < segments_[s]; r0 += kPromptRows)
          prompt_blocks_.push_back({first, r0, std::min(segments_[s], r0 + kPromptRows)});
      }
      // Blocks that see the most positions first, so the threads finish together.
      std::stable_sort(prompt_blocks_.begin(), prompt_blocks_.end(),
                       [&](const PromptBlock& a, const PromptBlock& b) {
                         return targets_[a.first].pos + a.r1 > targets_[b.first].pos + b.r1;
                       });
    }
    threads_.run_chunks(prompt_blocks_.size() * cfg_.kv_heads, [&](size_t i, unsigned t) {
      const PromptBlock& blk = prompt_blocks_[i / cfg_.kv_heads];
      const RowTarget& head = targets_[blk.first];
      attend_prompt_rows(cfg_, kv, layer, head.pages, head.pos, blk.r0, blk.r1,
                         static_cast<uint32_t>(i % cfg_.kv_heads), window, &q_[blk.first * q_dim], q_dim,
                         &attn_[blk.first * q_dim], q_dim, prompt_scratch_[t],
                         sees_to_.empty() ? nullptr : &sees_to_[blk.first]);
    });
    if (alone_rows_.empty()) return;
    // Rows alone: (row, kv head, segment) items, then each (row, kv head) combines its segments.
    const size_t m = alone_rows_.size();
    seg_first_.resize(m + 1);
    seg_first_[0] = 0;
    for (size_t j = 0; j < m; ++j)
      seg_first_[j + 1] =
          seg_first_[j] + cfg_.kv_heads * decode_segments(targets_[alone_rows_[j]].pos, window).count;
    if (partials_.size() < seg_first_[m]) partials_.resize(seg_first_[m]);
    threads_.run_chunks(seg_first_[m], [&](size_t i, unsigned t) {
      const size_t j = std::upper_bound(seg_first_.begin(), seg_first_.end(), i) - seg_first_.begin() - 1;
      const size_t r = alone_rows_[j];
      const SegmentRange segs = decode_segments(targets_[r].pos, window);
      const uint32_t local = uint32_t(i - seg_first_[j]);
      attend_decode_segment(cfg_, kv, layer, targets_[r], local / segs.count, segs.first + local % segs.count,
                            window, &q_[r * q_dim], partials_[i], decode_scratch_[t]);
    });
    threads_.run(m * cfg_.kv_heads, [&](size_t b0, size_t e0, unsigned) {
      for (size_t i = b0; i < e0; ++i) {
        const size_t j = i / cfg_.kv_heads, r = alone_rows_[j];
        const uint32_t g = uint32_t(i % cfg_.kv_heads), segs = decode_segments(targets_[r].pos, window).count;
        combine_decode_segments(cfg_, g, std::span(partials_).subspan(seg_first_[j] + g * segs, segs),
                                &attn_[r * q_dim]);
      }
    });
  }

  // Rows of a prompt chunk per attention block.
  static constexpr size_t kPromptRows = 64;

  // LM head over `rows` final hidden states, always by the decode kernels, so logits never depend on the
  // batch.
  void compute_logits(const float* h, size_t rows) {
    logits_.resize(rows * cfg_.vocab);
    const Out head[] = {{&w_.head(), logits_.data()}};
    matmul_.run(h, rows, cfg_.d_model, head, /*prefill=*/false);
    const float cap = w_.arch.final_logit_softcap;
    if (w_.lm_head_bias.empty() && cap == 0.0f) return;
    for (size_t r = 0; r < rows; ++r) {
      add_bias(logits_.data(), w_.lm_head_bias, r);
      if (cap != 0.0f)
        for (float* l = &logits_[r * cfg_.vocab]; l != &logits_[(r + 1) * cfg_.vocab]; ++l)
          *l = cap * std::tanh(*l / cap);
    }
  }

  ModelConfig cfg_;
  DecoderWeights w_;
  DecoderOptions opts_;
  bool exact_;
  ThreadPool threads_;
  Matmul matmul_;
  std::vector<AttentionScratch> exact_scratch_;
  std::vector<PromptAttentionScratch> prompt_scratch_;
  std::vector<DecodeScratch> decode_scratch_;
  std::vector<DecodePartial> partials_;  // rows alone: per (row, kv head, segment)
  std::vector<size_t> seg_first_;        // rows alone: the j-th one's first partial
  std::vector<size_t> alone_rows_;       // rows attended alone (decode, one-token chunks)
  struct PromptBlock {
    size_t first;   // the chunk's first row
    size_t r0, r1;  // the block's rows in the chunk
  };
  std::vector<PromptBlock> prompt_blocks_;
  // Prefill: each piece's row count, in row order (one entry for a lone chunk); empty in decode.
  std::vector<size_t> segments_, expert_segments_;
  std::vector<float> last_rows_;  // a batch's last row of each piece, for the LM head
  bool keep_all_ = false;
  RopeTable rope_;
  std::optional<RopeTable> rope_swa_;  // the sliding layers', when some slide
  float q_scale_;
  std::vector<RowTarget> targets_;
  std::vector<uint32_t> sees_to_;  // prefill with bidirectional images: each row's last visible position
  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_, proj_, fused_, logits_;
  // Mixture of experts: router probabilities, each row's chosen experts and weights, an expert's rows.
  std::vector<float> router_, chosen_weight_, expert_in_, expert_down_, expert_out_;
  std::vector<uint32_t> chosen_;
  std::vector<size_t> slots_;
  std::vector<float> routing_margin_;  // per row of the last call (experts only)
};

}  // namespace

std::unique_ptr<LlamaRunner> make_decoder(const ModelConfig& cfg, DecoderWeights weights,
                                          DecoderOptions opts) {
  return std::make_unique<Decoder>(cfg, std::move(weights), std::move(opts));
}

}  // namespace epd::model::detail
