#pragma once
// A GGUF checkpoint as the decoder runs it: its family, its shape (ModelConfig) and what it computes beyond
// the shape (DecoderArch), read from the "<arch>.*" keys llama.cpp defines; then its tensors, each taken by
// llama.cpp's name and checked for its shape. Whatever the file holds that epd would not use — a key or a
// tensor — is an error naming it (families/family.hpp).
#include <memory>

#include "decoder/decoder_weights.hpp"
#include "epd/model/config.hpp"
#include "epd/model/gguf.hpp"
#include "families/family.hpp"

namespace epd::model::detail {

struct GgufModel {
  const families::DecoderFamily* family = nullptr;
  ModelConfig cfg;
  DecoderArch arch;  // without the frequency factors, which are tensors (load_gguf_weights)
};

// config_error naming the file and the key for an unsupported architecture, a missing or malformed key, a
// value epd does not run (RoPE scaling type, experts, non-causal attention, ...) or a key nobody reads.
protocol::Result<GgufModel> read_gguf_model(const GgufFile& file);

// The weights of `model` (cfg: the caller's, of the file's shape) in place in `file`'s mapping; `lib` is
// required for tensors in other types than f32. config_error for a missing tensor, a wrong shape or type,
// and any tensor left over.
protocol::Result<DecoderWeights> load_gguf_weights(const ModelConfig& cfg, const GgufModel& model,
                                                   const std::shared_ptr<const GgufFile>& file,
                                                   const ggml::Library* lib);

}  // namespace epd::model::detail
