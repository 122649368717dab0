// Reading a GGUF checkpoint (gguf_model.hpp): the keys llama.cpp's loader reads for every architecture
// (llama_model::load_hparams) here, the family's own in its file (families/), then the tensors by
// llama.cpp's names, every one of them accounted for.
#include "decoder/gguf_model.hpp"

#include <cmath>
#include <filesystem>
#include <set>

#include "decoder/checkpoint_tensors.hpp"

namespace epd::model::detail {
namespace {

namespace fs = std::filesystem;
using families::BlockLayout;
using families::DecoderFamily;
using families::KeyReader;

// A value read from a key (Result of optional) or the error it gave.
#define EPD_READ(var, expr) \
  auto var = (expr);        \
  if (!var) return var.error();

// The RoPE scaling of the file (llama_model::load_hparams and llama_context's YaRN set-up): type (default
// "linear", llama.cpp's), factor, YaRN's original context and the attention factor.
protocol::Status read_rope(KeyReader& keys, const DecoderFamily& family, const ModelConfig& c, uint64_t n_ctx,
                           RopeSpec& rope) {
  EPD_READ(base, keys.real("rope.freq_base"));
  rope.style = family.rope_style;
  rope.base = base->value_or(10000.0);
  if (!(rope.base > 1.0 && rope.base < 1e12))
    return bad(keys.where(), keys.full("rope.freq_base") + " out of range");
  EPD_READ(dims, keys.uint("rope.dimension_count"));
  rope.dims = dims->has_value() ? static_cast<uint32_t>(std::min<uint64_t>(**dims, UINT32_MAX)) : c.head_dim;
  if (rope.dims == 0 || rope.dims % 2 != 0 || rope.dims > c.head_dim)
    return bad(keys.where(), keys.full("rope.dimension_count") + " (" + std::to_string(rope.dims) +
                                 ") must be even and at most the head dim (" + std::to_string(c.head_dim) +
                                 ")");
  // llama.cpp requires the whole head to rotate for these (load_hparams' n_rot check).
  if (family.rope_style == RopeStyle::interleaved && rope.dims != c.head_dim)
    return bad(keys.where(), "partial RoPE (" + keys.full("rope.dimension_count") + " != head dim) is not " +
                                 "supported by " + std::string(family.name));

  EPD_READ(type, keys.string("rope.scaling.type"));
  const std::string kind = type->value_or("linear");
  const bool longrope_ok = family.layout.rope_factors == BlockLayout::RopeFactors::long_short;
  if (kind != "none" && kind != "linear" && kind != "yarn" && !(kind == "longrope" && longrope_ok))
    return bad(keys.where(), keys.full("rope.scaling.type") + " '" + kind + "' is not supported by " +
                                 std::string(family.name) + " (supported: none, linear, yarn" +
                                 (longrope_ok ? ", longrope)" : ")"));
  EPD_READ(factor, keys.real("rope.scaling.factor"));
  EPD_READ(linear, keys.real("rope.scale_linear"));  // the old key, read when the new one is absent
  const double f = factor->has_value() ? **factor : linear->value_or(0.0);
  if (!(f >= 0.0 && f < 1e6)) return bad(keys.where(), keys.full("rope.scaling.factor") + " out of range");
  rope.freq_scale = kind == "none" || f == 0.0 ? 1.0 : 1.0 / f;
  EPD_READ(orig, keys.uint("rope.scaling.original_context_length"));
  rope.n_ctx_orig = static_cast<uint32_t>(std::min<uint64_t>(orig->value_or(n_ctx), UINT32_MAX));
  EPD_READ(attn, keys.real("rope.scaling.attn_factor"));
  rope.attn_factor = attn->value_or(1.0);
  keys.value("rope.scaling.finetuned");  // whether it was trained with its scaling: changes nothing computed
  if (kind == "yarn") {
    // llama_context: ext_factor 1; yarn_attn_factor = get_mscale(factor) / (1 + 0.1 ln factor), which the
    // kernel's own magnitude scaling (1 + 0.1 ln factor) then cancels to get_mscale(factor).
    rope.ext_factor = 1.0;
    const double factor_v = 1.0 / rope.freq_scale;
    const double mscale = factor_v <= 1.0 ? 1.0 : 0.1 * std::log(factor_v) + 1.0;
    rope.attn_factor *= mscale / (1.0 + 0.1 * std::log(factor_v));
    if (rope.n_ctx_orig == 0)
      return bad(keys.where(), "YaRN needs " + keys.full("rope.scaling.original_context_length"));
  }
  return {};
}

// A key that must be absent or hold the value that changes nothing (experts, non-causal attention, ...).
protocol::Status require_absent_or(KeyReader& keys, std::string_view key, uint64_t neutral,
                                   const std::string& what) {
  const GgufValue* v = keys.value(key);
  if (!v) return {};
  const bool neutral_value = (v->is_integer() || v->type == GgufType::boolean) && v->i >= 0 &&
                             static_cast<uint64_t>(v->i) == neutral;
  if (!neutral_value) return bad(keys.where(), keys.full(key) + ": " + what + " is not supported");
  return {};
}

}  // namespace

protocol::Result<GgufModel> read_gguf_model(const GgufFile& g) {
  const std::string where = "GGUF " + g.name();
  auto arch_name = g.get_string("general.architecture");
  if (!arch_name) return arch_name.error();
  if (!arch_name->has_value()) return bad(where, "no general.architecture");
  GgufModel m;
  m.family = families::family_by_gguf_arch(**arch_name);
  if (!m.family)
    return bad(where, "unsupported architecture '" + **arch_name +
                          "' (supported: " + families::family_names() + ")");
  const DecoderFamily& family = *m.family;
  KeyReader keys(g, **arch_name);
  ModelConfig& c = m.cfg;
  auto name = g.get_string("general.name");
  c.name = name && name->has_value() ? **name : fs::path(g.name()).stem().string();
  c.checkpoint = g.name();

  // The shape: required and optional integers, each checked for its type; per-layer arrays only when
  // every layer has the same value.
  const auto u32 = [&](std::string_view key, bool required, bool per_layer,
                       uint64_t fallback) -> protocol::Result<uint64_t> {
    auto v = per_layer ? keys.uniform_uint(key) : keys.uint(key);
    if (!v) return v.error();
    if (!v->has_value()) {
      if (required) return bad(where, "missing metadata key " + keys.full(key));
      return fallback;
    }
    if (**v > UINT32_MAX) return bad(where, keys.full(key) + " out of range");
    return **v;
  };
  EPD_READ(d, u32("embedding_length", true, false, 0));
  EPD_READ(layers, u32("block_count", true, false, 0));
  EPD_READ(ffn, u32("feed_forward_length", true, true, 0));
  EPD_READ(heads, u32("attention.head_count", true, true, 0));
  if (*heads == 0) return bad(where, keys.full("attention.head_count") + " must be positive");
  EPD_READ(kv_heads, u32("attention.head_count_kv", false, true, *heads));
  EPD_READ(context, u32("context_length", false, false, 2048));
  EPD_READ(key_len, u32("attention.key_length", false, false, *d / *heads));
  EPD_READ(value_len, u32("attention.value_length", false, false, *key_len));
  if (*value_len != *key_len)
    return bad(where, keys.full("attention.value_length") + " differs from " +
                          keys.full("attention.key_length") + ", which epd does not support");
  c.d_model = static_cast<uint32_t>(*d);
  c.layers = static_cast<uint32_t>(*layers);
  c.ffn = static_cast<uint32_t>(*ffn);
  c.heads = static_cast<uint32_t>(*heads);
  c.kv_heads = static_cast<uint32_t>(*kv_heads);
  c.head_dim = static_cast<uint32_t>(*key_len);
  EPD_READ(vocab, u32("vocab_size", false, false, 0));
  if (*vocab) {
    c.vocab = static_cast<uint32_t>(*vocab);
  } else {
    const TensorRef* emb = g.tensor("token_embd.weight");
    if (!emb || emb->shape.size() != 2 || emb->shape[0] > UINT32_MAX)
      return bad(where, "no " + keys.full("vocab_size") + " and no 2-D token_embd.weight to take it from");
    c.vocab = static_cast<uint32_t>(emb->shape[0]);
  }
  EPD_READ(eps, keys.real("attention.layer_norm_rms_epsilon"));
  if (!eps->has_value())
    return bad(where, "missing metadata key " + keys.full("attention.layer_norm_rms_epsilon"));
  c.norm_eps = static_cast<float>(**eps);
  if (auto st = read_rope(keys, family, c, *context, m.arch.rope); !st) return st.error();
  c.rope_theta = static_cast<float>(m.arch.rope.base);
  if (auto st = finish_shape(c, where, *context); !st) return st.error();

  // What epd's decoder does not do: refused when present with a value that would change the arithmetic.
  if (auto st = require_absent_or(keys, "attention.causal", 1, "non-causal attention"); !st)
    return st.error();
  if (family.layout.experts) {
    EPD_READ(experts, u32("expert_count", true, false, 0));
    EPD_READ(used, u32("expert_used_count", true, true, 0));
    if (*experts == 0 || *experts > 1024 || *used == 0 || *used > *experts)
      return bad(where, keys.full("expert_used_count") + " (" + std::to_string(*used) + ") must be in 1.." +
                            keys.full("expert_count") + " (" + std::to_string(*experts) + "), at most 1024");
    EPD_READ(expert_ffn, u32("expert_feed_forward_length", false, true, c.ffn / *used));
    if (*expert_ffn == 0 || *expert_ffn > 65536)
      return bad(where, keys.full("expert_feed_forward_length") + " must be in 1..65536");
    m.arch.experts = static_cast<uint32_t>(*experts);
    m.arch.experts_used = static_cast<uint32_t>(*used);
    m.arch.expert_ffn = static_cast<uint32_t>(*expert_ffn);
  } else {
    for (const char* key : {"expert_count", "expert_used_count"})
      if (auto st = require_absent_or(keys, key, 0, "mixture of experts"); !st) return st.error();
  }

  if (auto st = family.read_keys(keys, c, m.arch); !st) return st.error();
  c.mrope = m.arch.rope.multi();
  if (const std::string k = keys.unread_key(); !k.empty())
    return bad(where, "metadata key " + k + " is not used by epd's " + std::string(family.name) +
                          " decoder (what it selects is not supported)");
  return m;
}

protocol::Result<DecoderWeights> load_gguf_weights(const ModelConfig& c, const GgufModel& m,
                                                   const std::shared_ptr<const GgufFile>& file,
                                                   const ggml::Library* lib) {
  const std::string where = "GGUF " + file->name();
  const BlockLayout& layout = m.family->layout;
  std::set<std::string> taken;
  const Lookup find = [&](const std::string& name) -> const TensorRef* {
    const TensorRef* t = file->tensor(name);
    if (t) taken.insert(name);
    return t;
  };
  const auto present = [&](const std::string& name) { return file->tensor(name) != nullptr; };
  const MatrixSource src{find, where, true, false, lib};
  const uint64_t d = c.d_model, hd = c.head_dim, q = uint64_t{c.heads} * hd, kv = uint64_t{c.kv_heads} * hd,
                 f = c.ffn;
  DecoderWeights w;
  w.arch = m.arch;
  w.ggml = lib;
  const auto matrix = [&](const std::string& name, uint64_t rows, uint64_t cols, WeightMatrix& out) {
    return take_matrix(src, name, rows, cols, 0, 0, out);
  };
  const auto vec = [&](const std::string& name, uint64_t n, std::vector<float>& out) {
    return take_f32(find, where, name, {n}, out);
  };
  // A bias, when the file has one (and the family may have it).
  const auto bias = [&](const std::string& name, uint64_t n, bool allowed, std::vector<float>& out) {
    return allowed && present(name) ? vec(name, n, out) : protocol::Status{};
  };

  if (auto st = matrix("token_embd.weight", c.vocab, d, w.tok_emb); !st) return st.error();
  if (auto st = vec("output_norm.weight", d, w.final_norm); !st) return st.error();
  if (present("output.weight"))
    if (auto st = matrix("output.weight", c.vocab, d, w.lm_head); !st) return st.error();
  if (auto st = bias("output.bias", c.vocab, layout.output_bias, w.lm_head_bias); !st) return st.error();

  // Frequency factors: rope_freqs, or LongRoPE's long ones when the context exceeds the original one
  // (llama_model::get_rope_factors: epd's context is max_seq).
  const uint64_t pairs = w.arch.rope.dims / 2;
  std::string factors;
  if (layout.rope_factors == BlockLayout::RopeFactors::freqs && present("rope_freqs.weight"))
    factors = "rope_freqs.weight";
  if (layout.rope_factors == BlockLayout::RopeFactors::long_short) {
    const bool long_ctx = c.max_seq > w.arch.rope.n_ctx_orig;
    const std::string chosen = long_ctx ? "rope_factors_long.weight" : "rope_factors_short.weight";
    const std::string other = long_ctx ? "rope_factors_short.weight" : "rope_factors_long.weight";
    if (present(chosen)) factors = chosen;
    if (present(other)) taken.insert(other);  // the other context's factors: used at the other length
  }
  if (!factors.empty()) {
    if (auto st = vec(factors, pairs, w.arch.rope.freq_factors); !st) return st.error();
    for (float x : w.arch.rope.freq_factors)
      if (!(std::isfinite(x) && x > 0.0f))
        return bad(where, "tensor " + factors + " holds a factor that is not positive");
  }

  // A block's router and its experts: each expert's matrix a view of its rows of the 3-D tensor.
  const uint64_t n_exp = w.arch.experts, ef = w.arch.expert_ffn;
  const auto slices = [&](const std::string& name, uint64_t rows, uint64_t cols,
                          std::vector<WeightMatrix>& out) -> protocol::Status {
    auto t = find_shaped(find, where, name, {n_exp, rows, cols});
    if (!t) return t.error();
    if ((*t)->type != TensorType::f32 && !lib)
      return bad(where, "tensor " + name + " is " + std::string(tensor_type_name((*t)->type)) +
                            ", which needs llama.cpp's kernels");
    if ((*t)->type == TensorType::f32 &&
        reinterpret_cast<uintptr_t>((*t)->bytes.data()) % alignof(float) != 0)
      return bad(where, "tensor " + name + " is not aligned for f32");
    const uint64_t bytes = row_bytes((*t)->type, cols) * rows;
    out.clear();
    for (uint64_t e = 0; e < n_exp; ++e) {
      const TensorRef slice{name, (*t)->type, {rows, cols}, (*t)->bytes.subspan(e * bytes, bytes)};
      out.push_back(WeightMatrix::view(slice));
    }
    return {};
  };
  const auto experts_of = [&](const auto& blk, DecoderLayer& L) -> protocol::Status {
    if (auto st = matrix(blk("ffn_gate_inp.weight"), n_exp, d, L.router.w); !st) return st;
    if (auto st = slices(blk("ffn_gate_exps.weight"), ef, d, L.gate_exps); !st) return st;
    if (auto st = slices(blk("ffn_up_exps.weight"), ef, d, L.up_exps); !st) return st;
    return slices(blk("ffn_down_exps.weight"), d, ef, L.down_exps);
  };

  w.layers.resize(c.layers);
  for (uint32_t l = 0; l < c.layers; ++l) {
    DecoderLayer& L = w.layers[l];
    const auto blk = [&](const char* name) { return "blk." + std::to_string(l) + "." + name; };
    if (auto st = vec(blk("attn_norm.weight"), d, L.attn_norm); !st) return st.error();
    if (present(blk("attn_qkv.weight"))) {
      if (auto st = matrix(blk("attn_qkv.weight"), q + 2 * kv, d, L.wqkv.w); !st) return st.error();
      if (present(blk("attn_qkv.bias"))) {
        if (auto st = vec(blk("attn_qkv.bias"), q + 2 * kv, L.wqkv.bias); !st) return st.error();
      } else if (present(blk("attn_q.bias")) && present(blk("attn_k.bias")) && present(blk("attn_v.bias"))) {
        // Separate biases beside fused weights (older files): one bias of the fused rows.
        std::vector<float> parts[3];
        const uint64_t sizes[3] = {q, kv, kv};
        const char* names[3] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
        for (int i = 0; i < 3; ++i)
          if (auto st = vec(blk(names[i]), sizes[i], parts[i]); !st) return st.error();
        for (auto& p : parts) L.wqkv.bias.insert(L.wqkv.bias.end(), p.begin(), p.end());
      }
    } else {
      const struct {
        const char* weight;
        const char* bias;
        uint64_t rows;
        Linear* out;
      } parts[] = {{"attn_q.weight", "attn_q.bias", q, &L.wq},
                   {"attn_k.weight", "attn_k.bias", kv, &L.wk},
                   {"attn_v.weight", "attn_v.bias", kv, &L.wv}};
      for (const auto& p : parts) {
        if (auto st = matrix(blk(p.weight), p.rows, d, p.out->w); !st) return st.error();
        if (auto st = bias(blk(p.bias), p.rows, true, p.out->bias); !st) return st.error();
      }
    }
    if (auto st = matrix(blk("attn_output.weight"), d, q, L.wo.w); !st) return st.error();
    if (auto st = bias(blk("attn_output.bias"), d, layout.out_bias, L.wo.bias); !st) return st.error();
    if (layout.qk_norm) {
      if (auto st = vec(blk("attn_q_norm.weight"), hd, L.q_norm); !st) return st.error();
      if (auto st = vec(blk("attn_k_norm.weight"), hd, L.k_norm); !st) return st.error();
    }
    if (layout.post_norms) {
      if (auto st = vec(blk("post_attention_norm.weight"), d, L.attn_post_norm); !st) return st.error();
      if (auto st = vec(blk("post_ffw_norm.weight"), d, L.ffn_post_norm); !st) return st.error();
    }
    if (auto st = vec(blk("ffn_norm.weight"), d, L.ffn_norm); !st) return st.error();
    if (layout.experts) {
      if (auto st = experts_of(blk, L); !st) return st.error();
      continue;
    }
    if (layout.fused_gate_up) {
      if (auto st = matrix(blk("ffn_up.weight"), 2 * f, d, L.w_gate_up.w); !st) return st.error();
    } else {
      if (auto st = matrix(blk("ffn_gate.weight"), f, d, L.w_gate.w); !st) return st.error();
      if (auto st = matrix(blk("ffn_up.weight"), f, d, L.w_up.w); !st) return st.error();
      if (auto st = bias(blk("ffn_gate.bias"), f, layout.ffn_biases, L.w_gate.bias); !st) return st.error();
      if (auto st = bias(blk("ffn_up.bias"), f, layout.ffn_biases, L.w_up.bias); !st) return st.error();
    }
    if (auto st = matrix(blk("ffn_down.weight"), d, f, L.w_down.w); !st) return st.error();
    if (auto st = bias(blk("ffn_down.bias"), d, layout.ffn_biases, L.w_down.bias); !st) return st.error();
  }
  // Every tensor accounted for: one epd would not use would be a part of the model silently left out.
  for (const TensorRef& t : file->tensors())
    if (!taken.contains(t.name))
      return bad(where, "tensor " + t.name + " is not used by epd's " + std::string(m.family->name) +
                            " decoder (what it computes is not supported)");
  return w;
}

}  // namespace epd::model::detail
