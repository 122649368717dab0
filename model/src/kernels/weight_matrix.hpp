#pragma once
// A weight matrix (out x in, row-major, each row a whole number of its type's blocks), and the one place
// that multiplies activations by it. A GGUF tensor is used in place, in its own type, inside the file's
// mapping: roles on one host share those pages, and a page nobody multiplies by is never read. Where ggml's
// CPU back end would repack a matrix for this CPU, its repacked copy (ggml/packed_weights.hpp, shared by the
// roles of a host too) is what is multiplied. Hugging Face tensors, whose rows may need permuting, are
// converted to f32 once and owned.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "epd/model/tensor.hpp"
#include "kernels/ggml/ggml_cpu.hpp"
#include "kernels/thread_pool.hpp"

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
  size_t row_bytes() const { return row_bytes_; }
  const std::byte* row(uint64_t r) const { return data_ + r * row_bytes_; }
  const float* f32() const { return reinterpret_cast<const float*>(data_); }  // type() == f32
  // Row r as floats (cols values): an embedding lookup. Reads the original layout, never the packed one.
  void row_to_f32(uint64_t r, float* out, const ggml::Library* lib) const;

  // From now on multiplied in ggml's packed layout: `bytes` (as many as the original, outliving the
  // matrix) with `packing`'s kernels.
  void use_packed(const std::byte* bytes, const ggml::Packing* packing) {
    packed_ = bytes;
    packing_ = packing;
  }
  const ggml::Packing* packing() const { return packing_; }
  // Decode may multiply a batch with ggml's batch kernel (ggml::Library::batch_agrees): it gives every row
  // the bits the one-row kernel does.
  void set_batch_agrees(bool agrees) { batch_agrees_ = agrees; }
  bool batch_agrees() const { return batch_agrees_; }
  const std::byte* packed_row(uint64_t r) const { return packed_ + r * row_bytes_; }

 private:
  TensorType type_ = TensorType::f32;
  uint64_t rows_ = 0, cols_ = 0, row_bytes_ = 0;
  const std::byte* data_ = nullptr;
  const std::byte* packed_ = nullptr;
  const ggml::Packing* packing_ = nullptr;
  bool batch_agrees_ = false;
  std::vector<float>
      owned_;  // own(): data_ points here (a move keeps the buffer, so the pointer stays valid)
};

// y (rows x w.rows(), row stride w.rows()) = x (rows x in) * w^T, for several matrices of one input.
//
// f32 matrices: prefill through OpenBLAS sgemm over fixed blocks of output columns (one single-threaded call
// per block), decode through epd's fixed-order dot product (kernels.hpp). Every other type through ggml's CPU
// kernels as llama.cpp's CPU back end picks them on this machine, with the input rows converted once to the
// type the weights' kernels take (Q8_0, Q8_K, F16, ...):
// - prefill: packed matrices by ggml's GEMM over four rows at a time (GEMV for the rest), the block types
//   llamafile tiles by its tinyBLAS, f16/bf16 by OpenBLAS sgemm on the block converted to f32, every other
//   one by one vec_dot per element;
// - decode: the same batch kernels where ggml's batch kernel gives each row exactly the bits of its one-row
//   kernel on this CPU (checked at load, WeightMatrix::batch_agrees); elsewhere GEMV or vec_dot one sequence
//   at a time over each block of weight rows (so the block is read from memory once per step, not once per
//   sequence).
// Threads take fixed blocks of output columns, and every kernel computes an element the same way wherever
// its block starts: results never depend on the thread count, and a sequence decoded in a batch gets
// exactly the bits it gets alone. Prefill and decode may differ in the last bits (another kernel).
//
// A prompt's rows may come in segments (several rooms' chunks in one pass): each segment is multiplied as
// if it were the whole call (its own groups of four, its own sgemm shapes), so it gets exactly the bits it
// gets alone, while each block of weight rows is still read from memory once for all of them.
class Matmul {
 public:
  // exact: every f32 matrix, in prefill and decode, through epd's fixed-order dot product (kernels.hpp): the
  // reference model's rule, the same bits for any chunking, batch, thread count and ISA.
  Matmul(ThreadPool& threads, const ggml::Library* lib, bool exact = false)
      : threads_(threads), lib_(lib), exact_(exact) {}

  struct Out {
    const WeightMatrix* w;
    float* y;
  };
  // `segments` (prefill only): the rows' split, counts summing to `rows`; empty: one segment.
  void run(const float* x, size_t rows, size_t in, std::span<const Out> outs, bool prefill,
           std::span<const size_t> segments = {});

 private:
  // A segment of the call's rows.
  struct Segment {
    size_t first = 0, rows = 0;
    size_t group = 0;  // its first group of four in an interleaved input
  };
  void run_f32(const float* x, size_t in, const Out& out, bool prefill);
  void run_ggml(const float* x, size_t rows, size_t in, std::span<const Out> outs, bool prefill);
  // The input converted to `type` (row by row, or for GEMM four rows interleaved, then the rest row by row).
  struct Converted {
    uint32_t type = 0;
    bool interleaved = false;
    ggml::Packing::QuantizeMat quantize4 = nullptr;  // interleaved: the packing's input quantizer
    size_t first_row = 0;                            // row by row: rows before it are not needed
    size_t row_bytes = 0;
    std::vector<std::byte> data;
    std::vector<float> as_f32;  // f16/bf16 rows of a prompt back in f32, for the prompt GEMM (else empty)
  };
  // The index of the input in `type`, row by row, or (gemm set) interleaved for that packing's GEMM.
  size_t converted(uint32_t type, const ggml::Packing* gemm, size_t rows, size_t in);
  void multiply_block(const Out& o, size_t c0, size_t c1, const Segment& seg, size_t in, bool prefill,
                      const Converted& rowwise, const Converted* gemm_input) const;

  ThreadPool& threads_;
  const ggml::Library* lib_;
  bool exact_;
  // Scratch of one call, kept to spare allocations.
  std::vector<Segment> segments_;
  std::vector<size_t> group_first_;  // each interleaved group's first row
  std::vector<Converted> converted_;
  size_t n_converted_ = 0;
  std::vector<Out> others_;
  struct Inputs {
    size_t rowwise, gemm;  // converted_ indices; gemm is SIZE_MAX when no GEMM input is needed
  };
  std::vector<Inputs> inputs_;
  struct Block {
    size_t matrix, c0, c1;
  };
  std::vector<Block> blocks_;
};

}  // namespace epd::model::detail
