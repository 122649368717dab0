#include "kernels/weight_matrix.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "epd/model/kv_cache.hpp"
#include "kernels/ggml/ggml_cpu.hpp"
#include "kernels/kernels.hpp"

namespace epd::model::detail {
namespace {

// Output columns per prefill sgemm call: a multiple of the AVX-512 width that divides SmolLM2-135M's
// projection widths (576, 960, 192); other widths end with one narrower block.
constexpr size_t kSgemmCols = 96;
// Input rows a ggml kernel sweeps per weight row: their converted rows stay in L1/L2 while the weight row
// is reused (prefill; decode has at most a batch).
constexpr size_t kRowTile = 32;
// Output columns per block handed to a thread: a multiple of every packing's interleave (8) and of
// tinyBLAS's tiles; small enough that a block of weight rows stays in L2 while a batch passes over it.
constexpr size_t kColumnBlock = 64;

}  // namespace

WeightMatrix WeightMatrix::view(const TensorRef& t) {
  WeightMatrix m;
  m.type_ = t.type;
  m.rows_ = t.shape.size() == 2 ? t.shape[0] : 1;
  m.cols_ = t.shape.back();
  m.row_bytes_ = model::row_bytes(t.type, m.cols_);
  m.data_ = t.bytes.data();
  return m;
}

WeightMatrix WeightMatrix::own(std::vector<float> values, uint64_t rows, uint64_t cols) {
  WeightMatrix m;
  m.rows_ = rows;
  m.cols_ = cols;
  m.row_bytes_ = cols * sizeof(float);
  m.owned_ = std::move(values);
  m.data_ = reinterpret_cast<const std::byte*>(m.owned_.data());
  return m;
}

void WeightMatrix::row_to_f32(uint64_t r, float* out, const ggml::Library* lib) const {
  const std::byte* p = row(r);
  switch (type_) {
    case TensorType::f32:
      std::memcpy(out, p, cols_ * sizeof(float));
      return;
    case TensorType::f16:
    case TensorType::bf16:
      for (uint64_t i = 0; i < cols_; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = type_ == TensorType::f16 ? f16_to_f32(v) : bf16_to_f32(v);
      }
      return;
    default:
      lib->to_float(type_, p, out, static_cast<int64_t>(cols_));  // a quantized matrix implies the library
  }
}

void Matmul::run(const float* x, size_t rows, size_t in, std::span<const Out> outs, bool prefill,
                 std::span<const size_t> segments) {
  segments_.clear();
  size_t first = 0, groups = 0;
  for (size_t n : segments) {
    if (n == 0) continue;
    segments_.push_back({first, n, groups});
    first += n;
    groups += n / 4;
  }
  if (segments_.empty() || !prefill) segments_.assign(1, {0, rows, 0});
  others_.clear();
  for (const Out& o : outs) {
    // f32 decode goes through ggml's vec_dot_f32 when the library is loaded: twice the bandwidth of the
    // fixed-order kernel, which stays for prefill-free runs without it.
    if (o.w->type() == TensorType::f32 && (exact_ || prefill || !lib_))
      run_f32(x, in, o, prefill && !exact_);
    else
      others_.push_back(o);
  }
  if (!others_.empty()) run_ggml(x, rows, in, others_, prefill);
}

void Matmul::run_f32(const float* x, size_t in, const Out& o, bool prefill) {
  const float* w = o.w->f32();
  const size_t out = o.w->rows();
  if (!prefill) {
    const size_t rows = segments_.back().first + segments_.back().rows;
    threads_.run(out, [&](size_t b, size_t e, unsigned) {
      if (b != e) kernels::matmul_cols(x, rows, in, w, b, e, o.y, out);
    });
    return;
  }
  // sgemm over fixed blocks of columns, whatever the thread count: OpenBLAS's vector kernels sum in an
  // order that depends on the call's shape, so the same blocks (and one call per segment) keep prefill
  // bit-exact across thread counts and batches.
  const size_t blocks = (out + kSgemmCols - 1) / kSgemmCols;
  threads_.run(blocks, [&](size_t b0, size_t e0, unsigned) {
    for (size_t blk = b0; blk < e0; ++blk) {
      const size_t b = blk * kSgemmCols, e = std::min(out, b + kSgemmCols);
      for (const Segment& seg : segments_)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(seg.rows),
                    static_cast<int>(e - b), static_cast<int>(in), 1.0f, x + seg.first * in,
                    static_cast<int>(in), w + b * in, static_cast<int>(in), 0.0f, o.y + seg.first * out + b,
                    static_cast<int>(out));
    }
  });
}

size_t Matmul::converted(uint32_t type, const ggml::Packing* gemm, size_t rows, size_t in) {
  const bool interleaved = gemm != nullptr;
  for (size_t c = 0; c < n_converted_; ++c)
    if (converted_[c].type == type && converted_[c].interleaved == interleaved &&
        (!interleaved || converted_[c].quantize4 == gemm->quantize4))
      return c;
  if (converted_.size() <= n_converted_) converted_.emplace_back();
  Converted& cv = converted_[n_converted_];
  cv.type = type;
  cv.interleaved = interleaved;
  cv.quantize4 = interleaved ? gemm->quantize4 : nullptr;
  cv.first_row = rows;  // row-by-row inputs: lowered by each matrix that needs them
  cv.row_bytes = lib_->row_size(type, static_cast<int64_t>(in));
  // Four interleaved rows take the bytes of four rows; only each segment's whole groups of four are
  // interleaved.
  const Segment& last = segments_.back();
  cv.data.resize((interleaved ? (last.group + last.rows / 4) * 4 : rows) * cv.row_bytes);
  return n_converted_++;
}

void Matmul::run_ggml(const float* x, size_t rows, size_t in, std::span<const Out> outs, bool prefill) {
  // The input once in each layout the weights take (usually one or two: Q8_K rows for a k-quant layer, and
  // four-row interleaved Q8_K for its packed matrices in a prompt).
  n_converted_ = 0;
  constexpr size_t kNone = SIZE_MAX;
  const bool one_segment = segments_.size() == 1;
  size_t groups = 0, largest = 0;
  for (const Segment& seg : segments_) {
    groups += seg.rows / 4;
    largest = std::max(largest, seg.rows);
  }
  inputs_.clear();
  for (const Out& o : outs) {
    const ggml::Packing* p = o.w->packing();
    const uint32_t t = p ? p->input_type : lib_->input_type(o.w->type());
    const bool gemm = p && largest >= 4 && (prefill || o.w->batch_agrees());
    const size_t rowwise = converted(t, nullptr, rows, in);
    // A GEMM takes whole groups of four rows interleaved: only the rows after them are needed row by row
    // (one segment; with several, every row is converted, their tails being spread out).
    converted_[rowwise].first_row =
        std::min(converted_[rowwise].first_row, gemm && one_segment ? rows / 4 * 4 : 0);
    inputs_.push_back({rowwise, gemm ? converted(t, p, rows, in) : kNone});
  }
  // Conversion items: a group of four rows of an interleaved input, or one row of a row-by-row one.
  group_first_.clear();
  for (const Segment& seg : segments_)
    for (size_t g = 0; g < seg.rows / 4; ++g) group_first_.push_back(seg.first + 4 * g);
  const auto items_of = [rows, groups](const Converted& cv) {
    return cv.interleaved ? groups : rows - cv.first_row;
  };
  size_t items = 0;
  for (size_t c = 0; c < n_converted_; ++c) items += items_of(converted_[c]);
  threads_.run(items, [&](size_t b, size_t e, unsigned) {
    for (size_t i = b; i < e; ++i) {
      size_t c = 0, item = i;
      for (size_t n; item >= (n = items_of(converted_[c])); ++c) item -= n;
      Converted& cv = converted_[c];
      if (cv.interleaved) {
        cv.quantize4(x + group_first_[item] * in, cv.data.data() + 4 * item * cv.row_bytes,
                     static_cast<int64_t>(in));
      } else {
        const size_t r = cv.first_row + item;
        lib_->quantize_row(cv.type, x + r * in, cv.data.data() + r * cv.row_bytes, static_cast<int64_t>(in));
      }
    }
  });

  // A prompt through half-precision weights takes its input, rounded to their type, in f32 (multiply_block):
  // converted back once here, not in every block of columns.
  for (size_t c = 0; c < n_converted_; ++c) {
    Converted& cv = converted_[c];
    const auto t = static_cast<TensorType>(cv.type);
    cv.as_f32.clear();
    if (!prefill || largest < 2 || cv.interleaved || cv.first_row != 0 ||
        (t != TensorType::f16 && t != TensorType::bf16))
      continue;
    cv.as_f32.resize(rows * in);
    threads_.run(rows, [&](size_t b, size_t e, unsigned) {
      for (size_t r = b; r < e; ++r)
        lib_->to_float(t, cv.data.data() + r * cv.row_bytes, cv.as_f32.data() + r * in, int64_t(in));
    });
  }

  // Fixed blocks of output columns of every matrix, handed out to whichever thread is free; a block takes
  // every segment while its weight rows are in cache.
  blocks_.clear();
  for (size_t k = 0; k < outs.size(); ++k)
    for (size_t c0 = 0; c0 < outs[k].w->rows(); c0 += kColumnBlock)
      blocks_.push_back({k, c0, std::min<size_t>(outs[k].w->rows(), c0 + kColumnBlock)});
  threads_.run_chunks(blocks_.size(), [&](size_t i, unsigned) {
    const Block& blk = blocks_[i];
    const Inputs& in_k = inputs_[blk.matrix];
    for (const Segment& seg : segments_)
      multiply_block(outs[blk.matrix], blk.c0, blk.c1, seg, in, prefill, converted_[in_k.rowwise],
                     in_k.gemm == kNone ? nullptr : &converted_[in_k.gemm]);
  });
}

void Matmul::multiply_block(const Out& o, size_t c0, size_t c1, const Segment& seg, size_t in, bool prefill,
                            const Converted& rowwise, const Converted* gemm_input) const {
  const WeightMatrix& w = *o.w;
  const size_t ld = w.rows(), rows = seg.rows;
  const int n = static_cast<int>(in), nc = static_cast<int>(c1 - c0);
  float* y = o.y + seg.first * ld;  // the segment's rows, multiplied as a call of their own
  const std::byte* xr = rowwise.data.data() + seg.first * rowwise.row_bytes;
  if (const ggml::Packing* p = w.packing()) {
    const std::byte* wp = w.packed_row(c0);
    size_t r = 0;
    if (gemm_input && rows >= 4) {
      r = rows / 4 * 4;
      p->gemm(n, y + c0, ld, wp, gemm_input->data.data() + 4 * seg.group * gemm_input->row_bytes,
              static_cast<int>(r), nc);
    }
    for (; r < rows; ++r) p->gemv(n, y + r * ld + c0, ld, wp, xr + r * rowwise.row_bytes, 1, nc);
    return;
  }
  if ((prefill || w.batch_agrees()) &&
      lib_->sgemm(w.type(), c1 - c0, static_cast<int64_t>(rows), static_cast<int64_t>(in), w.row(c0),
                  w.row_bytes(), xr, rowwise.row_bytes, y + c0, static_cast<int64_t>(ld)))
    return;
  if (!rowwise.as_f32.empty() && rows >= 2 && (w.type() == TensorType::f16 || w.type() == TensorType::bf16)) {
    // A prompt through half-precision weights: tinyBLAS's float kernels need ggml's thread pool, so the
    // block's weight rows go to f32 and, with the input (already rounded to the weights' type, as the dot
    // product takes it, and back in f32: run_ggml), through one single-threaded OpenBLAS sgemm.
    // Half-precision products are exact in f32: the dot product's arithmetic, summed in another order.
    thread_local std::vector<float> wf;
    wf.resize(size_t(nc) * size_t(n));
    for (int c = 0; c < nc; ++c)
      lib_->to_float(w.type(), w.row(c0 + size_t(c)), wf.data() + size_t(c) * n, n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), nc, n, 1.0f,
                rowwise.as_f32.data() + seg.first * in, n, wf.data(), n, 0.0f, y + c0, static_cast<int>(ld));
    return;
  }
  // f16 weights (their input rounded to f16 too) by epd's f32-accumulating dot product: ggml's vec_dot_f16
  // sums in half precision on AVX512-FP16 CPUs (Sapphire Rapids and later), which would give an f16 file
  // another model there; this gives the same bits on every CPU.
  const bool f16 = w.type() == TensorType::f16;
  for (size_t r0 = 0; r0 < rows; r0 += kRowTile) {
    const size_t r1 = std::min(rows, r0 + kRowTile);
    for (size_t c = c0; c < c1; ++c) {
      const std::byte* wr = w.row(c);
      for (size_t r = r0; r < r1; ++r) {
        const std::byte* x = xr + r * rowwise.row_bytes;
        if (f16)
          y[r * ld + c] = kernels::dot_f16(reinterpret_cast<const uint16_t*>(wr),
                                           reinterpret_cast<const uint16_t*>(x), in);
        else
          lib_->vec_dot(w.type(), static_cast<int64_t>(in), y + r * ld + c, wr, x);
      }
    }
  }
}

}  // namespace epd::model::detail
