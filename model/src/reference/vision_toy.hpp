#pragma once
// The reference model's vision encoder: patches -> linear + 2-D position embeddings -> bidirectional blocks
// -> norm -> linear, one d_model row per patch (docs/model.md, "Architecture").
#include <vector>

#include "decoder/decoder.hpp"
#include "reference/reference_weights.hpp"

namespace epd::model::detail {

class VisionToy final : public ImageEncoder {
 public:
  VisionToy(const ModelConfig& cfg, VisionWeights w);
  protocol::Result<Embeddings> encode(const Image& image) override;

 private:
  void mlp(const BlockWeights& b, float* x, size_t n);
  void encoder_block(const BlockWeights& b, float* x, size_t n);

  ModelConfig cfg_;
  VisionWeights w_;
  std::vector<float> h_, q_, k_, v_, attn_, gate_, up_, proj_, scores_;  // scratch
};

}  // namespace epd::model::detail
