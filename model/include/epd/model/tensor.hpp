#pragma once
// One tensor of a checkpoint, whatever the file format: its element type, its shape in row-major order
// (outermost first, as PyTorch writes it; GGUF's ggml order is reversed on reading) and its bytes inside the
// file's mapping.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::model {

// The element types epd reads, numbered as ggml numbers them (a GGUF file stores these numbers). Quantized
// types are ggml's block formats: `block_elements` values along the innermost dimension in `block_bytes`
// bytes (Q8_0: an f16 scale and 32 int8 values; the k-quants: super-blocks of 256 with packed sub-block
// scales). epd knows the sizes itself, so a file is checked without llama.cpp's libraries; the arithmetic of
// the quantized types is ggml's (model/src/kernels/ggml/).
enum class TensorType : uint8_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  iq4_nl = 20,  // llama-quantize's fallback for Q2_K/Q3_K rows that are not a multiple of 256
  bf16 = 30,
};

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;  // ggml's spelling: "f32", "q4_K", ...
  uint32_t block_elements;
  uint32_t block_bytes;
};

// Every type above, in ggml number order.
std::span<const TensorTypeInfo> tensor_types();
const TensorTypeInfo& tensor_type_info(TensorType t);
// The type a ggml type number names, if epd reads it.
std::optional<TensorType> tensor_type_from_ggml(uint32_t ggml_type);
// "F32, F16, Q4_0, ..." for error messages.
std::string supported_tensor_types();

std::string_view tensor_type_name(TensorType t);
inline bool is_quantized(TensorType t) {
  return t != TensorType::f32 && t != TensorType::f16 && t != TensorType::bf16;
}

struct TensorRef {
  std::string name;
  TensorType type = TensorType::f32;
  std::vector<uint64_t> shape;       // outermost first
  std::span<const std::byte> bytes;  // exactly tensor_bytes(type, shape) bytes

  uint64_t elements() const;
};

// Bytes of one row of `elements` values; 0 if the row is not a whole number of blocks.
uint64_t row_bytes(TensorType t, uint64_t elements);

// Bytes of a tensor of this type and shape; 0 if the count overflows or a row (the innermost dimension) is
// not a whole number of blocks (callers treat 0 as "invalid shape" since every dimension is >= 1).
uint64_t tensor_bytes(TensorType t, std::span<const uint64_t> shape);

// Converts to f32: exact for f16/bf16, scale*value for Q8_0 (epd's own code), ggml's dequantization for the
// other quantized types (an error if llama.cpp's libraries cannot be loaded). out.size() must equal
// t.elements().
protocol::Status tensor_to_f32(const TensorRef& t, std::span<float> out);

}  // namespace epd::model
