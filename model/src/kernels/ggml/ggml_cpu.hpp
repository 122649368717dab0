#pragma once
// llama.cpp's ggml libraries as epd uses them: the dequantizers and quantizers of libggml-base, and the CPU
// back end's matrix kernels — per-row dot products (vec_dot), llamafile's tiled GEMM for prompts (tinyBLAS),
// and the GEMM/GEMV kernels over repacked weights with the repacking itself. Both libraries come prebuilt
// with the npm package node-llama-cpp (scripts/setup-deps); the CPU back end ships once per instruction set
// and is chosen at run time by each variant's own score, as ggml's back-end loader chooses it. Loaded with
// dlopen on first use, so a process that never runs a ggml kernel needs none of it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "epd/model/tensor.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model::ggml {

// A layout ggml's CPU back end repacks a matrix into for this CPU: `cols` consecutive rows interleaved
// block by block, multiplied by GEMM (four input rows at a time) and GEMV (one) kernels. The repacked matrix
// has exactly the bytes of the original; llama.cpp keeps it in its CPU_REPACK buffers.
struct Packing {
  using Gemm = void (*)(int n, float* s, size_t bs, const void* vx, const void* vy, int nr, int nc);
  using QuantizeMat = void (*)(const float* x, void* vy, int64_t k);
  std::string name;         // "q4_K_8x8_q8_K", as ggml names the kernels
  uint32_t cols = 0;        // rows interleaved together: column blocks handed to a kernel are multiples
  uint32_t input_type = 0;  // ggml type the input rows are quantized to (Q8_0 or Q8_K)
  Gemm gemm = nullptr;      // nr a multiple of 4: input from quantize4
  Gemm gemv = nullptr;      // nr = 1: input from Library::quantize_row(input_type)
  QuantizeMat quantize4 = nullptr;  // four consecutive float rows -> one interleaved input block row
};

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

  // llamafile's tinyBLAS, as ggml's mul_mat calls it for prompts: C (n x ldc floats) = B (n rows of
  // input_type(weights), k values each) x A^T (m rows of `weights`), for m weight rows. Only the block types
  // it tiles without ggml's thread pool (Q8_0, Q4_0, Q5_0, IQ4_NL on x86); false (nothing written) for the
  // others and for n < 2, which ggml multiplies row by row too.
  bool sgemm(TensorType weights, int64_t m, int64_t n, int64_t k, const void* a, size_t a_row_bytes,
             const void* b, size_t b_row_bytes, float* c, int64_t ldc) const;

  // The layout ggml repacks a rows x cols matrix of `t` into on this CPU, as its CPU_REPACK buffer decides
  // (none for types or shapes it leaves alone, or when the kernels cannot be found).
  std::optional<Packing> packing(TensorType t, int64_t rows, int64_t cols) const;
  // The matrix `src` (rows x cols of `t`) in that layout, written to `dst` (as many bytes), by ggml's own
  // repacking. config_error if ggml would not repack it.
  protocol::Status repack(TensorType t, int64_t rows, int64_t cols, const void* src, void* dst) const;

  // Whether ggml's kernel for several input rows computes each of them to exactly the bits its kernel for
  // one row does, for rows of n values: tinyBLAS against vec_dot for `t` (unpacked), or the packing's GEMM
  // against its GEMV. Where they agree, a decode batch may use the batch kernel and still give every
  // sequence the bits it gets alone. Decided once per process and (type or packing, n) by running both on
  // random data with the tail shapes a batch has (odd rows, a part of a column tile); an association order
  // that differs shows in nearly every element.
  bool batch_agrees(TensorType t, int64_t n) const;
  bool batch_agrees(const Packing& p, TensorType t, int64_t n) const;

 private:
  Library() = default;
  static protocol::Result<const Library*> load();
  // Allocates a CPU_REPACK tensor of this shape and hands it to `use` (null if ggml would not repack it).
  template <class F>
  auto with_repack_tensor(TensorType t, int64_t rows, int64_t cols, F&& use) const;

  struct TypeFns {
    void (*from_float)(const float*, void*, int64_t) = nullptr;
    void (*vec_dot)(int, float*, size_t, const void*, size_t, const void*, size_t, int) = nullptr;
    uint32_t vec_dot_type = 0;
    void (*to_float)(const void*, float*, int64_t) = nullptr;
  };
  static constexpr size_t kTypes = 64;

  std::string dir_, variant_;
  void* cpu_ = nullptr;  // the CPU variant's handle (kernels looked up by name)
  TypeFns fns_[kTypes];
  size_t (*row_size_)(int, int64_t) = nullptr;
  size_t (*quantize_chunk_)(int, const float*, void*, int64_t, int64_t, int64_t, const float*) = nullptr;
  bool (*sgemm_)(const void*, int64_t, int64_t, int64_t, const void*, int64_t, const void*, int64_t, void*,
                 int64_t, int, int, int) = nullptr;
  // The CPU variant's f16 -> f32 row conversion (vectorised; libggml-base's to_float is a scalar loop).
  void (*fp16_to_fp32_)(const uint16_t*, float*, int64_t) = nullptr;
  // libggml-base's tensor and buffer API and the CPU_REPACK buffer type, for repacking.
  struct Backend;
  const Backend* backend_ = nullptr;
};

}  // namespace epd::model::ggml
