#pragma once
// llama.cpp's quantizer and CPU kernels as a process sees them (model/src/kernels/ggml/): for tools and tests
// that write quantized GGUF files, and for logs that say which kernels run.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "epd/model/tensor.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// rows x cols floats (row-major) -> the bytes of a `type` tensor, by ggml_quantize_chunk (what
// llama-quantize runs, without an importance matrix). config_error if llama.cpp's libraries cannot be
// loaded or a row is not a whole number of the type's blocks.
protocol::Result<std::vector<std::byte>> quantize_rows(TensorType type, std::span<const float> values,
                                                       uint64_t rows, uint64_t cols);

// The libggml-cpu variant this process runs quantized tensors on ("haswell", "zen4", ...).
protocol::Result<std::string> ggml_cpu_variant();

// Where this process keeps ggml's repacked weights, shared by the roles of a host: $EPD_CACHE_DIR, else
// $XDG_CACHE_HOME/epd, else $HOME/.cache/epd; empty if none (docs/model.md, "Quantized GGUF").
std::string packed_weights_dir();

}  // namespace epd::model
