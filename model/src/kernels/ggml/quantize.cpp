#include "epd/model/quantize.hpp"

#include <cstring>

#include "kernels/ggml/ggml_cpu.hpp"
#include "kernels/ggml/packed_weights.hpp"

namespace epd::model {

protocol::Result<std::vector<std::byte>> quantize_rows(TensorType type, std::span<const float> values,
                                                       uint64_t rows, uint64_t cols) {
  const uint64_t row = row_bytes(type, cols);
  if (row == 0 || values.size() != rows * cols)
    return protocol::make_error(protocol::ErrorCode::config_error,
                                "cannot quantize " + std::to_string(rows) + " x " + std::to_string(cols) +
                                    " to " + std::string(tensor_type_name(type)) +
                                    ": rows must be whole blocks of " +
                                    std::to_string(tensor_type_info(type).block_elements));
  std::vector<std::byte> out(rows * row);
  if (type == TensorType::f32) {
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  auto lib = ggml::Library::get();
  if (!lib) return lib.error();
  (*lib)->quantize(type, values.data(), out.data(), static_cast<int64_t>(rows), static_cast<int64_t>(cols));
  return out;
}

protocol::Result<std::string> ggml_cpu_variant() {
  auto lib = ggml::Library::get();
  if (!lib) return lib.error();
  return (*lib)->cpu_variant();
}

std::string packed_weights_dir() {
  return ggml::PackedWeights::default_cache_dir();
}

}  // namespace epd::model
