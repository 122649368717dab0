// The seeded reference model (docs/model.md): the decoder with its seeded weights and exact arithmetic, the
// byte vocabulary's IMAGE token taking the toy vision encoder's embeddings, BOS and IMAGE never sampled.
#include "decoder/decoder.hpp"
#include "epd/model/runner.hpp"
#include "reference/reference_weights.hpp"
#include "reference/vision_toy.hpp"

namespace epd::model {
namespace {

detail::WeightMatrix matrix(std::vector<float> v, uint64_t rows, uint64_t cols) {
  return detail::WeightMatrix::own(std::move(v), rows, cols);
}

}  // namespace

protocol::Result<std::unique_ptr<ModelRunner>> make_reference_runner(const ModelConfig& cfg) {
  if (auto st = validate(cfg); !st) return st.error();
  detail::ReferenceWeights r = detail::make_weights(cfg);
  const uint64_t d = cfg.d_model, q = uint64_t{cfg.heads} * cfg.head_dim,
                 kv = uint64_t{cfg.kv_heads} * cfg.head_dim;
  detail::DecoderWeights w;
  w.tok_emb = matrix(std::move(r.tok_emb), cfg.vocab, d);
  w.final_norm = std::move(r.final_norm);
  w.lm_head = matrix(std::move(r.lm_head), cfg.vocab, d);
  w.arch.rope.base = cfg.rope_theta;
  for (detail::BlockWeights& b : r.blocks) {
    detail::DecoderLayer& L = w.layers.emplace_back();
    L.attn_norm = std::move(b.attn_norm);
    L.ffn_norm = std::move(b.mlp_norm);
    L.wq.w = matrix(std::move(b.wq), q, d);
    L.wk.w = matrix(std::move(b.wk), kv, d);
    L.wv.w = matrix(std::move(b.wv), kv, d);
    L.wo.w = matrix(std::move(b.wo), d, q);
    L.w_gate.w = matrix(std::move(b.w_gate), cfg.ffn, d);
    L.w_up.w = matrix(std::move(b.w_up), cfg.ffn, d);
    L.w_down.w = matrix(std::move(b.w_down), d, cfg.ffn);
  }
  detail::DecoderOptions opts;
  opts.arithmetic = detail::Arithmetic::exact;
  opts.image_token = kImage;
  opts.filter = TokenFilter::reference;
  opts.encoder = std::make_unique<detail::VisionToy>(cfg, detail::make_vision_weights(cfg));
  return std::unique_ptr<ModelRunner>(detail::make_decoder(cfg, std::move(w), std::move(opts)));
}

namespace {

// A checkpoint without a vision tower: every image refused, nothing loaded.
class NoVisionTower final : public ImageEncoder {
 public:
  explicit NoVisionTower(std::string name) : name_(std::move(name)) {}
  protocol::Result<Embeddings> encode(const Image&) override {
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "model " + name_ +
                                    " is a text-only checkpoint: it has no vision tower, images "
                                    "are not supported");
  }

 private:
  std::string name_;
};

}  // namespace

protocol::Result<std::unique_ptr<ImageEncoder>> make_image_encoder(const ModelConfig& cfg) {
  if (auto st = validate(cfg); !st) return st.error();
  if (!cfg.checkpoint.empty())
    return std::unique_ptr<ImageEncoder>(std::make_unique<NoVisionTower>(cfg.name));
  return std::unique_ptr<ImageEncoder>(
      std::make_unique<detail::VisionToy>(cfg, detail::make_vision_weights(cfg)));
}

}  // namespace epd::model
