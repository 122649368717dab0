#include "decoder/checkpoint_tensors.hpp"

#include <algorithm>

namespace epd::model::detail {
namespace {

// Hugging Face rows of each head are [first halves | second halves] of the rotated pairs; llama.cpp's
// converter (and epd) interleave them: row 2i takes row i, row 2i+1 takes row i + head_dim/2.
void interleave_rope_rows(std::vector<float>& w, uint32_t heads, uint32_t hd, uint32_t in) {
  std::vector<float> src = w;
  const uint32_t half = hd / 2;
  for (uint32_t h = 0; h < heads; ++h)
    for (uint32_t i = 0; i < half; ++i)
      for (uint32_t j = 0; j < 2; ++j)
        std::copy_n(&src[(size_t{h} * hd + j * half + i) * in], in, &w[(size_t{h} * hd + 2 * i + j) * in]);
}

}  // namespace

protocol::Error bad(const std::string& where, const std::string& detail) {
  return protocol::make_error(protocol::ErrorCode::config_error, where + ": " + detail);
}

protocol::Status finish_shape(ModelConfig& c, const std::string& where, uint64_t context) {
  c.max_seq = static_cast<uint32_t>(std::clamp<uint64_t>(context, 1, kMaxContext));
  if (c.heads == 0 || c.kv_heads == 0 || c.heads % c.kv_heads != 0)
    return bad(where, "heads (" + std::to_string(c.heads) + ") must be a multiple of kv heads (" +
                          std::to_string(c.kv_heads) + ")");
  if (auto st = validate(c); !st) return bad(where, st.error().detail);
  return {};
}

protocol::Result<const TensorRef*> find_shaped(const Lookup& find, const std::string& where,
                                               const std::string& name, const std::vector<uint64_t>& shape) {
  const TensorRef* t = find(name);
  if (!t) return bad(where, "missing tensor " + name);
  if (t->shape != shape) {
    auto show = [](const std::vector<uint64_t>& s) {
      std::string r = "[";
      for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
      return r + "]";
    };
    return bad(where, "tensor " + name + " has shape " + show(t->shape) + ", expected " + show(shape));
  }
  return t;
}

protocol::Status take_f32(const Lookup& find, const std::string& where, const std::string& name,
                          std::vector<uint64_t> shape, std::vector<float>& out) {
  auto t = find_shaped(find, where, name, shape);
  if (!t) return t.error();
  out.resize((*t)->elements());
  return tensor_to_f32(**t, out);
}

protocol::Status take_matrix(const MatrixSource& src, const std::string& name, uint64_t rows, uint64_t cols,
                             uint32_t rope_heads, uint32_t head_dim, WeightMatrix& out) {
  auto t = find_shaped(src.find, src.where, name, {rows, cols});
  if (!t) return t.error();
  // An f32 tensor is read as floats: in place only where the file aligns it so (GGUF's general.alignment
  // may be 1); ggml's block types are byte-addressed.
  const bool aligned =
      (*t)->type != TensorType::f32 || reinterpret_cast<uintptr_t>((*t)->bytes.data()) % alignof(float) == 0;
  if (src.in_place && aligned) {
    if ((*t)->type != TensorType::f32 && !src.ggml)
      return bad(src.where, "tensor " + name + " is " + std::string(tensor_type_name((*t)->type)) +
                                ", which needs llama.cpp's kernels");
    out = WeightMatrix::view(**t);
    return {};
  }
  std::vector<float> v(rows * cols);
  if (auto st = tensor_to_f32(**t, v); !st) return st;
  if (src.hf && rope_heads) interleave_rope_rows(v, rope_heads, head_dim, static_cast<uint32_t>(cols));
  out = WeightMatrix::own(std::move(v), rows, cols);
  return {};
}

}  // namespace epd::model::detail
