#pragma once
// The parameters of a decoder (decoder.hpp) as it uses them: the seeded reference model's, owned in f32, or
// a checkpoint's (loader.hpp). From GGUF every matrix stays in the file's mapping in its own type, or in
// ggml's repacked copy shared by the host's roles (kernels/weight_matrix.hpp); from a Hugging Face checkpoint
// matrices are converted to f32 once. Q and K projection rows are in the interleaved RoPE order (pairs
// (2i, 2i+1) of a head rotate together): GGUF and the reference model store them so, and a Hugging Face
// checkpoint's "rotate half" rows are permuted on load.
#include <memory>
#include <string>
#include <vector>

#include "decoder/decoder_arch.hpp"
#include "epd/model/gguf.hpp"
#include "kernels/ggml/packed_weights.hpp"
#include "kernels/weight_matrix.hpp"

namespace epd::model::detail {

// A matrix and its optional bias (empty: none), added after the product.
struct Linear {
  WeightMatrix w;
  std::vector<float> bias;
};

struct DecoderLayer {
  std::vector<float> attn_norm;  // d
  // Q, K and V as three matrices, or fused in one (wqkv: q rows, then k, then v; wq/wk/wv then empty).
  Linear wq, wk, wv, wqkv, wo;
  std::vector<float> q_norm, k_norm;  // head_dim each: RMSNorm of every query / key head (QK-norm), or none
  std::vector<float> attn_post_norm;  // d: RMSNorm of the attention output before the residual, or none
  std::vector<float> ffn_norm;        // d
  // The gate and up projections as two matrices, or fused in one (w_gate_up: gate rows, then up).
  Linear w_gate, w_up, w_gate_up, w_down;
  std::vector<float> ffn_post_norm;  // d: RMSNorm of the feed-forward output before the residual, or none
  // Mixture of experts (router has rows): the router (experts x d) and each expert's gate, up (expert_ffn x
  // d) and down (d x expert_ffn) matrices, views into the file's 3-D tensors, in place of w_gate/w_up/w_down.
  Linear router;
  std::vector<WeightMatrix> gate_exps, up_exps, down_exps;
};

struct DecoderWeights {
  DecoderArch arch;
  WeightMatrix tok_emb;  // vocab x d
  std::vector<DecoderLayer> layers;
  std::vector<float> final_norm;                      // d
  WeightMatrix lm_head;                               // vocab x d; no rows when tied to tok_emb
  std::vector<float> lm_head_bias;                    // vocab, or none
  const ggml::Library* ggml = nullptr;                // llama.cpp's kernels, when loaded
  std::shared_ptr<const GgufFile> file;               // the mapping in-place matrices point into
  std::shared_ptr<const ggml::PackedWeights> packed;  // ggml's repacked copies, where it repacks

  const WeightMatrix& head() const { return lm_head.rows() ? lm_head : tok_emb; }
};

// Every matrix of the layers (each expert's too: its rows of a 3-D tensor) and an untied head, in a fixed
// order.
template <class W, class F>
void for_each_layer_matrix(W& w, F&& f) {
  for (auto& L : w.layers)
    for (auto* m :
         {&L.wq, &L.wk, &L.wv, &L.wqkv, &L.wo, &L.w_gate, &L.w_up, &L.w_gate_up, &L.w_down, &L.router})
      if (m->w.rows()) f(m->w);
  for (auto& L : w.layers)
    for (auto* experts : {&L.gate_exps, &L.up_exps, &L.down_exps})
      for (auto& m : *experts) f(m);
  if (w.lm_head.rows()) f(w.lm_head);
}

// LlamaRunner::kernels() of these weights: "ggml-cpu zen4; 180 of 211 matrices repacked (...) in PATH; ...".
std::string describe_kernels(const DecoderWeights& w);

}  // namespace epd::model::detail
