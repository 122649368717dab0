#include "weight_matrix.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "epd/model/kv_cache.hpp"
#include "ggml/ggml_cpu.hpp"
#include "kernels.hpp"

namespace epd::model::detail {
namespace {

// Output columns per prefill sgemm call: a multiple of the AVX-512 width that divides SmolLM2-135M's
// projection widths (576, 960, 192); other widths end with one narrower block.
constexpr size_t kSgemmCols = 96;
// Input rows a ggml kernel sweeps per weight row: their converted rows stay in L1/L2 while the weight row
// is reused (prefill; decode has at most a batch).
constexpr size_t kRowTile = 32;

}  // namespace

WeightMatrix WeightMatrix::view(const TensorRef& t) {
  WeightMatrix m;
  m.type_ = t.type;
  m.rows_ = t.shape.size() == 2 ? t.shape[0] : 1;
  m.cols_ = t.shape.back();
  m.row_bytes_ = row_bytes(t.type, m.cols_);
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

void Matmul::run(const float* x, size_t rows, size_t in, std::span<const Out> outs, bool prefill) {
  others_.clear();
  for (const Out& o : outs) {
    if (o.w->type() == TensorType::f32)
      run_f32(x, rows, in, o, prefill);
    else
      others_.push_back(o);
  }
  if (!others_.empty()) run_ggml(x, rows, in, others_);
}

void Matmul::run_f32(const float* x, size_t rows, size_t in, const Out& o, bool prefill) {
  const float* w = o.w->f32();
  const size_t out = o.w->rows();
  if (!prefill) {
    threads_.run(out, [&](size_t b, size_t e, unsigned) {
      if (b != e) kernels::matmul_cols(x, rows, in, w, b, e, o.y, out);
    });
    return;
  }
  // sgemm over fixed blocks of columns, whatever the thread count: OpenBLAS's vector kernels sum in an
  // order that depends on the call's shape, so the same blocks keep prefill bit-exact across thread counts.
  const size_t blocks = (out + kSgemmCols - 1) / kSgemmCols;
  threads_.run(blocks, [&](size_t b0, size_t e0, unsigned) {
    for (size_t blk = b0; blk < e0; ++blk) {
      const size_t b = blk * kSgemmCols, e = std::min(out, b + kSgemmCols);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(e - b),
                  static_cast<int>(in), 1.0f, x, static_cast<int>(in), w + b * in, static_cast<int>(in), 0.0f,
                  o.y + b, static_cast<int>(out));
    }
  });
}

void Matmul::run_ggml(const float* x, size_t rows, size_t in, std::span<const Out> outs) {
  // The input once in each type the weights take (usually one: Q8_K for a k-quant layer, Q8_0 for Q4_0...).
  size_t n_conv = 0;
  std::vector<size_t> conv_of(outs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    const uint32_t t = lib_->input_type(outs[k].w->type());
    size_t c = 0;
    while (c < n_conv && converted_[c].type != t) ++c;
    if (c == n_conv) {
      if (converted_.size() <= n_conv) converted_.emplace_back();
      Converted& cv = converted_[n_conv++];
      cv.type = t;
      cv.row_bytes = lib_->row_size(t, static_cast<int64_t>(in));
      cv.data.resize(rows * cv.row_bytes);
    }
    conv_of[k] = c;
  }
  threads_.run(rows * n_conv, [&](size_t b, size_t e, unsigned) {
    for (size_t i = b; i < e; ++i) {
      Converted& cv = converted_[i / rows];
      const size_t r = i % rows;
      lib_->quantize_row(cv.type, x + r * in, cv.data.data() + r * cv.row_bytes, static_cast<int64_t>(in));
    }
  });

  // Output columns of all matrices in one range, so threads share the work whatever the widths.
  size_t total = 0;
  for (const Out& o : outs) total += o.w->rows();
  threads_.run(total, [&](size_t b, size_t e, unsigned) {
    size_t base = 0;
    for (size_t k = 0; k < outs.size() && base < e; base += outs[k].w->rows(), ++k) {
      const WeightMatrix& w = *outs[k].w;
      const size_t lo = std::max(b, base), hi = std::min(e, base + w.rows());
      if (lo >= hi) continue;
      const Converted& cv = converted_[conv_of[k]];
      const size_t ld = w.rows();
      for (size_t r0 = 0; r0 < rows; r0 += kRowTile) {
        const size_t r1 = std::min(rows, r0 + kRowTile);
        for (size_t o = lo - base; o < hi - base; ++o) {
          const std::byte* wr = w.row(o);
          for (size_t r = r0; r < r1; ++r)
            lib_->vec_dot(w.type(), static_cast<int64_t>(in), outs[k].y + r * ld + o, wr,
                          cv.data.data() + r * cv.row_bytes);
        }
      }
    }
  });
}

}  // namespace epd::model::detail
