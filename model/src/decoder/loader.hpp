#pragma once
// A checkpoint's weights for the decoder: the file cfg.checkpoint names (GGUF, or a Hugging Face directory or
// safetensors file), read by its family's tensor names (families/), every tensor checked by name and shape.
#include "decoder/decoder_weights.hpp"
#include "epd/model/config.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model::detail {

// cfg must be the checkpoint's own shape (read_checkpoint_config) but for page_size, threads and a shorter
// max_seq. config_error naming the file and the problem; io_error for unreadable files.
protocol::Result<DecoderWeights> load_decoder_weights(const ModelConfig& cfg);

}  // namespace epd::model::detail
