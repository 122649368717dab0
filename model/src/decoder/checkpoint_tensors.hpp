#pragma once
// What both checkpoint readers (GGUF, gguf_model.cpp; Hugging Face, loader.cpp) share: errors that name the
// file, the shape checks of ModelConfig, and taking one tensor by name, checked against its expected shape,
// as f32 values or as a matrix in place.
#include <functional>
#include <string>
#include <vector>

#include "decoder/decoder_weights.hpp"
#include "epd/model/config.hpp"
#include "epd/model/tensor.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model::detail {

inline constexpr uint32_t kMaxContext = 65536;  // ModelConfig's max_seq bound (sizes the RoPE tables)

// config_error "<where>: <detail>".
protocol::Error bad(const std::string& where, const std::string& detail);

// Sets max_seq from the context length and checks the shape against ModelConfig's limits.
protocol::Status finish_shape(ModelConfig& c, const std::string& where, uint64_t context);

// One tensor by name (null: missing).
using Lookup = std::function<const TensorRef*(const std::string&)>;

// The tensor, if its shape (outermost first) is `shape`; config_error naming it when missing or shaped
// otherwise.
protocol::Result<const TensorRef*> find_shaped(const Lookup& find, const std::string& where,
                                               const std::string& name, const std::vector<uint64_t>& shape);

// A tensor converted to f32 (norms, biases, frequency factors; every tensor of a Hugging Face checkpoint).
protocol::Status take_f32(const Lookup& find, const std::string& where, const std::string& name,
                          std::vector<uint64_t> shape, std::vector<float>& out);

// Matrices in place (GGUF: `ggml` is the library for types other than f32, or null) or converted to f32
// and, for a Hugging Face checkpoint (`hf`), with Q and K rows put in the interleaved RoPE order.
struct MatrixSource {
  const Lookup& find;
  const std::string& where;
  bool in_place;
  bool hf;
  const ggml::Library* ggml;
};

protocol::Status take_matrix(const MatrixSource& src, const std::string& name, uint64_t rows, uint64_t cols,
                             uint32_t rope_heads, uint32_t head_dim, WeightMatrix& out);

}  // namespace epd::model::detail
