#include "epd/model/quantize.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

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
  // Rows are quantized independently (the same bytes however they are split): a large tensor is cut into
  // one run of rows per core, as llama-quantize cuts it — the k-quant searches are slow.
  const uint64_t parts = values.size() < (uint64_t{1} << 22)
                             ? 1
                             : std::clamp<uint64_t>(std::thread::hardware_concurrency(), 1, rows);
  auto run = [&](uint64_t first, uint64_t end) {
    (*lib)->quantize(type, values.data() + first * cols, out.data() + first * row,
                     static_cast<int64_t>(end - first), static_cast<int64_t>(cols));
  };
  std::vector<std::thread> threads;
  for (uint64_t p = 1; p < parts; ++p) threads.emplace_back(run, rows * p / parts, rows * (p + 1) / parts);
  run(0, rows / parts);
  for (auto& t : threads) t.join();
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
