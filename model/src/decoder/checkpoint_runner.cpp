// The runners of checkpoints (epd/model/llama.hpp): the decoder with a family's weights (loader.hpp) and
// fast arithmetic; and make_runner, which picks a checkpoint's runner or the reference model's.
#include "decoder/decoder.hpp"
#include "decoder/loader.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "families/family.hpp"
#include "kernels/blas_core.hpp"

namespace epd::model {

protocol::Result<std::unique_ptr<LlamaRunner>> make_llama_runner(const ModelConfig& cfg) {
  return make_llama_runner(cfg, nullptr);
}

protocol::Result<std::unique_ptr<LlamaRunner>> make_llama_runner(const ModelConfig& cfg,
                                                                 std::unique_ptr<ImageEncoder> encoder) {
  using protocol::ErrorCode;
  if (cfg.checkpoint.empty())
    return protocol::make_error(ErrorCode::config_error, "model config names no checkpoint");
  if (auto st = validate(cfg); !st) return st.error();
  auto w = detail::load_decoder_weights(cfg);
  if (!w) return w.error();
  detail::DecoderOptions opts;
  opts.image_token = image_token(cfg);  // an mmproj's rows, at the id past the vocabulary
  opts.bidirectional_images = cfg.bidirectional_images;
  opts.encoder = std::move(encoder);
  return detail::make_decoder(cfg, std::move(*w), std::move(opts));
}

std::vector<CheckpointFamily> checkpoint_families() {
  std::vector<CheckpointFamily> out;
  for (const families::DecoderFamily* f : families::decoder_families())
    out.push_back({std::string(f->name), std::string(f->gguf_arch), std::string(f->examples),
                   !f->hf_model_type.empty(), families::gguf_tensor_patterns(*f),
                   families::gguf_key_names(*f)});
  return out;
}

std::string prefill_blas_core() {
  return detail::select_blas_core();
}

protocol::Result<std::unique_ptr<ModelRunner>> make_runner(const ModelConfig& cfg) {
  if (cfg.checkpoint.empty()) return make_reference_runner(cfg);
  auto r = make_llama_runner(cfg);
  if (!r) return r.error();
  return std::unique_ptr<ModelRunner>(std::move(*r));
}

}  // namespace epd::model
