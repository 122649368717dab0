#pragma once
// A weight matrix (out x in, row-major, each row a whole number of its type's blocks), and the one place
// that multiplies activations by it. A GGUF tensor is used in place, in its own type, inside the file's
// mapping: roles on one host share those pages, and a page nobody multiplies by is never read. Hugging Face
// tensors, whose rows may need permuting, are converted to f32 once and owned.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "epd/model/tensor.hpp"
#include "ggml/ggml_cpu.hpp"
#include "thread_pool.hpp"

namespace epd::model::detail {

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // The tensor's bytes in place (shape {rows, cols}); the mapping must outlive the matrix.
  static WeightMatrix view(const TensorRef& t);
  static WeightMatrix own(std::vector<float> values, uint64_t rows, uint64_t cols);
  WeightMatrix(WeightMatrix&&) = default;
  WeightMatrix& operator=(WeightMatrix&&) = default;

  TensorType type() const { return type_; }
  uint64_t rows() const { return rows_; }
  uint64_t cols() const { return cols_; }
  const std::byte* row(uint64_t r) const { return data_ + r * row_bytes_; }
  const float* f32() const { return reinterpret_cast<const float*>(data_); }  // type() == f32
  // Row r as floats (cols values): an embedding lookup.
  void row_to_f32(uint64_t r, float* out, const ggml::Library* lib) const;

 private:
  TensorType type_ = TensorType::f32;
  uint64_t rows_ = 0, cols_ = 0, row_bytes_ = 0;
  const std::byte* data_ = nullptr;
  std::vector<float>
      owned_;  // own(): data_ points here (a move keeps the buffer, so the pointer stays valid)
};

// y (rows x w.rows(), row stride w.rows()) = x (rows x in) * w^T, for several matrices of one input.
//
// f32 matrices: prefill through OpenBLAS sgemm over fixed blocks of output columns (one single-threaded call
// per block), decode through epd's fixed-order dot product (kernels.hpp). Every other type: ggml's CPU row
// kernels, as llama.cpp's CPU back end runs them on this machine: the input rows are converted once to
// the type the weights' dot product takes (Q8_0, Q8_K, F16, ...), then every output element is one
// vec_dot of a weight row with an input row. So an element's bits never depend on the batch, the chunk or
// the thread count (threads split output columns, never a sum); prefill and decode give the same bits.
class Matmul {
 public:
  Matmul(ThreadPool& threads, const ggml::Library* lib) : threads_(threads), lib_(lib) {}

  struct Out {
    const WeightMatrix* w;
    float* y;
  };
  void run(const float* x, size_t rows, size_t in, std::span<const Out> outs, bool prefill);

 private:
  void run_f32(const float* x, size_t rows, size_t in, const Out& out, bool prefill);
  void run_ggml(const float* x, size_t rows, size_t in, std::span<const Out> outs);

  ThreadPool& threads_;
  const ggml::Library* lib_;
  struct Converted {
    uint32_t type = 0;
    size_t row_bytes = 0;
    std::vector<std::byte> data;
  };
  std::vector<Converted> converted_;  // the input in each type this call's weights take
  std::vector<Out> others_;
};

}  // namespace epd::model::detail
