#pragma once
// The parameters of a Llama-family checkpoint in f32, as the runner uses them. Q and K projection rows are
// in the interleaved RoPE order (pairs (2i, 2i+1) of a head rotate together): GGUF stores them so, and a
// Hugging Face checkpoint's "rotate half" rows (pairs (i, i + head_dim/2)) are permuted on load. The dot
// product of q and k is the same in either order, so both files compute the same attention.
#include <string>
#include <vector>

#include "epd/model/config.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

struct LlamaLayer {
  std::vector<float> attn_norm;             // d
  std::vector<float> wq, wk, wv, wo;        // out x in
  std::vector<float> ffn_norm;              // d
  std::vector<float> w_gate, w_up, w_down;  // out x in
};

struct LlamaWeights {
  std::vector<float> tok_emb;  // vocab x d
  std::vector<LlamaLayer> layers;
  std::vector<float> final_norm;  // d
  std::vector<float> lm_head;     // vocab x d; empty when tied to tok_emb
};

protocol::Result<LlamaWeights> load_llama_weights(const ModelConfig& cfg);

}  // namespace epd::model
