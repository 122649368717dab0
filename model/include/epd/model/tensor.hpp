#pragma once
// One tensor of a checkpoint, whatever the file format: its element type, its shape in row-major order
// (outermost first, as PyTorch writes it; GGUF's ggml order is reversed on reading) and its bytes inside the
// file's mapping.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::model {

// Q8_0 is ggml's block format: blocks of 32 elements along the innermost dimension, each an f16 scale and
// 32 int8 values (34 bytes); element = scale * value.
enum class TensorType : uint8_t { f32, f16, bf16, q8_0 };

inline constexpr uint64_t kQ8Block = 32;
inline constexpr uint64_t kQ8BlockBytes = 34;

std::string_view tensor_type_name(TensorType t);

struct TensorRef {
  std::string name;
  TensorType type = TensorType::f32;
  std::vector<uint64_t> shape;       // outermost first
  std::span<const std::byte> bytes;  // exactly tensor_bytes(type, shape) bytes

  uint64_t elements() const;
};

// Bytes of a tensor of this type and shape; 0 if the count overflows or a Q8_0 row is not a whole number of
// blocks (callers treat 0 as "invalid shape" since every dimension is >= 1).
uint64_t tensor_bytes(TensorType t, std::span<const uint64_t> shape);

// Converts to f32 (exact for f16/bf16, scale*value for Q8_0). out.size() must equal t.elements().
protocol::Status tensor_to_f32(const TensorRef& t, std::span<float> out);

}  // namespace epd::model
