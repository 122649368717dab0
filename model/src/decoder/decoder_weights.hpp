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

#include "epd/model/gguf.hpp"
#include "kernels/ggml/packed_weights.hpp"
#include "kernels/weight_matrix.hpp"

namespace epd::model::detail {

struct DecoderLayer {
  std::vector<float> attn_norm;       // d
  WeightMatrix wq, wk, wv, wo;        // out x in
  std::vector<float> ffn_norm;        // d
  WeightMatrix w_gate, w_up, w_down;  // out x in
};

struct DecoderWeights {
  WeightMatrix tok_emb;  // vocab x d
  std::vector<DecoderLayer> layers;
  std::vector<float> final_norm;                      // d
  WeightMatrix lm_head;                               // vocab x d; no rows when tied to tok_emb
  const ggml::Library* ggml = nullptr;                // llama.cpp's kernels, when loaded
  std::shared_ptr<const GgufFile> file;               // the mapping in-place matrices point into
  std::shared_ptr<const ggml::PackedWeights> packed;  // ggml's repacked copies, where it repacks

  const WeightMatrix& head() const { return lm_head.rows() ? lm_head : tok_emb; }
};

// LlamaRunner::kernels() of these weights: "ggml-cpu zen4; 180 of 211 matrices repacked (...) in PATH; ...".
std::string describe_kernels(const DecoderWeights& w);

}  // namespace epd::model::detail
