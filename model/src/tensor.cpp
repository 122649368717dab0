#include "epd/model/tensor.hpp"

#include <cstring>

#include "epd/model/kv_cache.hpp"

namespace epd::model {

std::string_view tensor_type_name(TensorType t) {
  switch (t) {
    case TensorType::f32:
      return "f32";
    case TensorType::f16:
      return "f16";
    case TensorType::bf16:
      return "bf16";
    case TensorType::q8_0:
      return "Q8_0";
  }
  return "?";
}

uint64_t TensorRef::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t tensor_bytes(TensorType t, std::span<const uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d == 0 || n > (uint64_t{1} << 62) / d) return 0;
    n *= d;
  }
  switch (t) {
    case TensorType::f32:
      return n * 4;
    case TensorType::f16:
    case TensorType::bf16:
      return n * 2;
    case TensorType::q8_0:
      if (shape.empty() || shape.back() % kQ8Block != 0) return 0;
      return n / kQ8Block * kQ8BlockBytes;
  }
  return 0;
}

protocol::Status tensor_to_f32(const TensorRef& t, std::span<float> out) {
  const uint64_t n = t.elements();
  if (out.size() != n || t.bytes.size() != tensor_bytes(t.type, t.shape))
    return protocol::make_error(protocol::ErrorCode::internal, "tensor " + t.name + ": size mismatch");
  const std::byte* p = t.bytes.data();
  auto u16_at = [p](uint64_t byte_off) {
    uint16_t v;
    std::memcpy(&v, p + byte_off, 2);
    return v;
  };
  switch (t.type) {
    case TensorType::f32:
      std::memcpy(out.data(), p, n * 4);
      break;
    case TensorType::f16:
      for (uint64_t i = 0; i < n; ++i) out[i] = f16_to_f32(u16_at(2 * i));
      break;
    case TensorType::bf16:
      for (uint64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(u16_at(2 * i));
      break;
    case TensorType::q8_0:
      for (uint64_t b = 0; b < n / kQ8Block; ++b) {
        const uint64_t off = b * kQ8BlockBytes;
        const float d = f16_to_f32(u16_at(off));
        for (uint64_t i = 0; i < kQ8Block; ++i)
          out[b * kQ8Block + i] = d * static_cast<float>(static_cast<int8_t>(p[off + 2 + i]));
      }
      break;
  }
  return {};
}

}  // namespace epd::model
