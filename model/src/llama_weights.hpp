#pragma once
// The parameters of a Llama-family checkpoint as the runner uses them. From GGUF every matrix stays in the
// file's mapping in its own type (weight_matrix.hpp); from a Hugging Face checkpoint matrices are converted
// to f32 once. Q and K projection rows are in the interleaved RoPE order (pairs (2i, 2i+1) of a head rotate
// together): GGUF stores them so, and a Hugging Face checkpoint's "rotate half" rows (pairs (i, i +
// head_dim/2)) are permuted on load. The dot product of q and k is the same in either order, so both files
// compute the same attention.
#include <memory>
#include <string>
#include <vector>

#include "epd/model/config.hpp"
#include "epd/model/gguf.hpp"
#include "epd/protocol/result.hpp"
#include "ggml/packed_weights.hpp"
#include "weight_matrix.hpp"

namespace epd::model {

struct LlamaLayer {
  std::vector<float> attn_norm;               // d
  detail::WeightMatrix wq, wk, wv, wo;        // out x in
  std::vector<float> ffn_norm;                // d
  detail::WeightMatrix w_gate, w_up, w_down;  // out x in
};

struct LlamaWeights {
  detail::WeightMatrix tok_emb;  // vocab x d
  std::vector<LlamaLayer> layers;
  std::vector<float> final_norm;         // d
  detail::WeightMatrix lm_head;          // vocab x d; no rows when tied to tok_emb
  const ggml::Library* ggml = nullptr;   // set when a matrix is in a type only ggml's kernels multiply
  std::shared_ptr<const GgufFile> file;  // the mapping in-place matrices point into
  std::shared_ptr<const ggml::PackedWeights> packed;  // ggml's repacked copies, where it repacks

  const detail::WeightMatrix& head() const { return lm_head.rows() ? lm_head : tok_emb; }
};

protocol::Result<LlamaWeights> load_llama_weights(const ModelConfig& cfg);

// LlamaRunner::kernels() of these weights.
std::string describe_kernels(const LlamaWeights& w);

}  // namespace epd::model
