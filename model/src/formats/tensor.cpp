#include "epd/model/tensor.hpp"

#include <cstring>

#include "epd/model/kv_cache.hpp"
#include "kernels/ggml/ggml_cpu.hpp"

namespace epd::model {
namespace {

// ggml's block layouts (ggml-common.h), checked against the loaded library (ggml::Library::load).
constexpr TensorTypeInfo kTypes[] = {
    {TensorType::f32, "f32", 1, 4},         {TensorType::f16, "f16", 1, 2},
    {TensorType::q4_0, "q4_0", 32, 18},     {TensorType::q4_1, "q4_1", 32, 20},
    {TensorType::q5_0, "q5_0", 32, 22},     {TensorType::q5_1, "q5_1", 32, 24},
    {TensorType::q8_0, "q8_0", 32, 34},     {TensorType::q2_k, "q2_K", 256, 84},
    {TensorType::q3_k, "q3_K", 256, 110},   {TensorType::q4_k, "q4_K", 256, 144},
    {TensorType::q5_k, "q5_K", 256, 176},   {TensorType::q6_k, "q6_K", 256, 210},
    {TensorType::iq4_nl, "iq4_nl", 32, 18}, {TensorType::bf16, "bf16", 1, 2},
};

}  // namespace

std::span<const TensorTypeInfo> tensor_types() {
  return kTypes;
}

const TensorTypeInfo& tensor_type_info(TensorType t) {
  for (const TensorTypeInfo& i : kTypes)
    if (i.type == t) return i;
  return kTypes[0];  // unreachable for a valid enumerator
}

std::optional<TensorType> tensor_type_from_ggml(uint32_t ggml_type) {
  for (const TensorTypeInfo& i : kTypes)
    if (static_cast<uint32_t>(i.type) == ggml_type) return i.type;
  return std::nullopt;
}

std::string supported_tensor_types() {
  std::string s;
  for (const TensorTypeInfo& i : kTypes) {
    if (!s.empty()) s += ", ";
    for (char c : i.name) s += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  }
  return s;
}

std::string_view tensor_type_name(TensorType t) {
  return tensor_type_info(t).name;
}

uint64_t TensorRef::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t row_bytes(TensorType t, uint64_t elements) {
  const TensorTypeInfo& i = tensor_type_info(t);
  if (elements % i.block_elements != 0) return 0;
  return elements / i.block_elements * i.block_bytes;
}

uint64_t tensor_bytes(TensorType t, std::span<const uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d == 0 || n > (uint64_t{1} << 62) / d) return 0;
    n *= d;
  }
  if (shape.empty()) return tensor_type_info(t).block_elements == 1 ? row_bytes(t, 1) : 0;
  const uint64_t row = row_bytes(t, shape.back());
  return row == 0 ? 0 : n / shape.back() * row;
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
      return {};
    case TensorType::f16:
      for (uint64_t i = 0; i < n; ++i) out[i] = f16_to_f32(u16_at(2 * i));
      return {};
    case TensorType::bf16:
      for (uint64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(u16_at(2 * i));
      return {};
    case TensorType::q8_0: {
      const TensorTypeInfo& q = tensor_type_info(TensorType::q8_0);
      for (uint64_t b = 0; b < n / q.block_elements; ++b) {
        const uint64_t off = b * q.block_bytes;
        const float d = f16_to_f32(u16_at(off));
        for (uint64_t i = 0; i < q.block_elements; ++i)
          out[b * q.block_elements + i] = d * static_cast<float>(static_cast<int8_t>(p[off + 2 + i]));
      }
      return {};
    }
    default:
      break;
  }
  auto lib = ggml::Library::get();
  if (!lib)
    return protocol::make_error(
        lib.error().code,
        "tensor " + t.name + " (" + std::string(tensor_type_name(t.type)) + "): " + lib.error().detail);
  const uint64_t cols = t.shape.back(), rows = n / cols, rb = row_bytes(t.type, cols);
  for (uint64_t r = 0; r < rows; ++r)
    (*lib)->to_float(t.type, p + r * rb, out.data() + r * cols, static_cast<int64_t>(cols));
  return {};
}

}  // namespace epd::model
