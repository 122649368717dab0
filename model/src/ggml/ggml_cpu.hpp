#pragma once
// llama.cpp's ggml libraries as epd uses them: the dequantizers and quantizers of libggml-base, and the
// per-type row kernels (activation quantizer + dot product) of libggml-cpu. Both come prebuilt with the npm
// package node-llama-cpp (scripts/setup-deps); the CPU back end ships once per instruction set and is chosen
// at run time by each variant's own score, as ggml's back-end loader chooses it. Loaded with dlopen on first
// use, so a process that never runs a quantized tensor (the reference model, an f32 checkpoint) needs none
// of it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "epd/model/tensor.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model::ggml {

class Library {
 public:
  // Loads the libraries once per process (thread-safe): from $EPD_GGML_DIR if set, else the directory the
  // build found (EPD_GGML_DEFAULT_DIR). $EPD_GGML_CPU names a variant ("haswell", "x64", ...) instead of
  // the best-scoring one. config_error naming the directory and what is missing when it fails; the same
  // error on every later call.
  static protocol::Result<const Library*> get();

  const std::string& dir() const { return dir_; }
  const std::string& cpu_variant() const { return variant_; }  // e.g. "haswell"

  // The type activations are converted to before a dot product with a row of `weights` (ggml's
  // vec_dot_type: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the k-quants, F16 and BF16 for
  // themselves). Q8_1 and Q8_K are not TensorTypes: the value is ggml's number.
  uint32_t input_type(TensorType weights) const;
  // Bytes of one row of n values of ggml type `ggml_type` (any ggml type, including Q8_1/Q8_K).
  size_t row_size(uint32_t ggml_type, int64_t n) const;
  // x (n floats) -> one row of `ggml_type` (the CPU variant's quantizer).
  void quantize_row(uint32_t ggml_type, const float* x, void* y, int64_t n) const;
  // *s = dot(row of `weights` of n values, row of input_type(weights)).
  void vec_dot(TensorType weights, int64_t n, float* s, const void* w_row, const void* x_row) const;
  // One row of `t` -> n floats (libggml-base's reference dequantizer).
  void to_float(TensorType t, const void* x, float* y, int64_t n) const;
  // llama-quantize's quantizer (libggml-base): rows of n_per_row floats -> `t`; returns bytes written.
  size_t quantize(TensorType t, const float* src, void* dst, int64_t rows, int64_t n_per_row) const;

 private:
  Library() = default;
  static protocol::Result<const Library*> load();

  struct TypeFns {
    void (*from_float)(const float*, void*, int64_t) = nullptr;
    void (*vec_dot)(int, float*, size_t, const void*, size_t, const void*, size_t, int) = nullptr;
    uint32_t vec_dot_type = 0;
    void (*to_float)(const void*, float*, int64_t) = nullptr;
  };
  static constexpr size_t kTypes = 64;

  std::string dir_, variant_;
  TypeFns fns_[kTypes];
  size_t (*row_size_)(int, int64_t) = nullptr;
  size_t (*quantize_chunk_)(int, const float*, void*, int64_t, int64_t, int64_t, const float*) = nullptr;
};

}  // namespace epd::model::ggml
