#pragma once
// All parameters of the reference model, generated from the config's seed (see docs/model.md).
#include <vector>

#include "epd/model/config.hpp"

namespace epd::model::detail {

// One pre-norm transformer block (LM or encoder). Matrices are out x in, row-major.
struct BlockWeights {
  std::vector<float> attn_norm;  // d
  std::vector<float> wq;         // heads*hd x d
  std::vector<float> wk;         // kvh*hd x d
  std::vector<float> wv;         // kvh*hd x d
  std::vector<float> wo;         // d x heads*hd
  std::vector<float> mlp_norm;   // d
  std::vector<float> w_gate;     // ffn x d
  std::vector<float> w_up;       // ffn x d
  std::vector<float> w_down;     // d x ffn
};

struct VisionWeights {
  std::vector<float> patch_proj;        // d x (patch*patch*3)
  std::vector<float> row_pos, col_pos;  // max_image_patches x d each
  std::vector<BlockWeights> blocks;
  std::vector<float> norm;  // d
  std::vector<float> out;   // d x d
};

struct ReferenceWeights {
  std::vector<float> tok_emb;  // vocab x d
  std::vector<BlockWeights> blocks;
  std::vector<float> final_norm;  // d
  std::vector<float> lm_head;     // vocab x d
};

// The language model's weights, and the vision encoder's alone (each tensor has its own stream, so either
// is what make_weights gives).
ReferenceWeights make_weights(const ModelConfig& cfg);
VisionWeights make_vision_weights(const ModelConfig& cfg);

}  // namespace epd::model::detail
