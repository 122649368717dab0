// The registry of decoder families (one line per family), and the key reader they share.
#include <algorithm>

#include "families/family.hpp"

namespace epd::model::families {

protocol::Status no_own_keys(KeyReader&, const ModelConfig&, detail::DecoderArch&) {
  return {};
}

std::span<const DecoderFamily* const> decoder_families() {
  static const DecoderFamily* const all[] = {&kLlama, &kMistral3, &kQwen2,  &kQwen2Vl,
                                             &kQwen3, &kQwen3Moe, &kGemma3, &kPhi3};
  return all;
}

const DecoderFamily* family_by_gguf_arch(std::string_view arch) {
  for (const DecoderFamily* f : decoder_families())
    if (f->gguf_arch == arch) return f;
  return nullptr;
}

const DecoderFamily* family_by_hf_model_type(std::string_view model_type) {
  for (const DecoderFamily* f : decoder_families())
    if (!f->hf_model_type.empty() && f->hf_model_type == model_type) return f;
  return nullptr;
}

std::string family_names() {
  std::string out;
  for (const DecoderFamily* f : decoder_families()) out += (out.empty() ? "" : ", ") + std::string(f->name);
  return out;
}

std::vector<std::string> gguf_tensor_patterns(const DecoderFamily& f) {
  const BlockLayout& l = f.layout;
  std::vector<std::string> out = {"token_embd.weight", "output_norm.weight", "output.weight"};
  if (l.output_bias) out.push_back("output.bias");
  if (l.rope_factors == BlockLayout::RopeFactors::freqs) out.push_back("rope_freqs.weight");
  if (l.rope_factors == BlockLayout::RopeFactors::long_short)
    for (const char* n : {"rope_factors_long.weight", "rope_factors_short.weight"}) out.push_back(n);
  std::vector<std::string> block = {"attn_norm.weight",   "attn_q.weight",   "attn_k.weight",
                                    "attn_v.weight",      "attn_q.bias",     "attn_k.bias",
                                    "attn_v.bias",        "attn_qkv.weight", "attn_qkv.bias",
                                    "attn_output.weight", "ffn_norm.weight"};
  if (l.experts) {
    for (const char* n :
         {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"})
      block.push_back(n);
  } else {
    for (const char* n : {"ffn_up.weight", "ffn_down.weight"}) block.push_back(n);
    if (!l.fused_gate_up) block.push_back("ffn_gate.weight");
  }
  if (l.out_bias) block.push_back("attn_output.bias");
  if (l.ffn_biases)
    for (const char* n : {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"}) block.push_back(n);
  if (l.qk_norm)
    for (const char* n : {"attn_q_norm.weight", "attn_k_norm.weight"}) block.push_back(n);
  if (l.post_norms)
    for (const char* n : {"post_attention_norm.weight", "post_ffw_norm.weight"}) block.push_back(n);
  for (const std::string& b : block) out.push_back("blk.%d." + b);
  return out;
}

std::vector<std::string> gguf_key_names(const DecoderFamily& f) {
  // gguf_model.cpp's read_gguf_model and read_rope.
  std::vector<std::string> out = {"embedding_length",
                                  "block_count",
                                  "feed_forward_length",
                                  "attention.head_count",
                                  "attention.head_count_kv",
                                  "context_length",
                                  "attention.key_length",
                                  "attention.value_length",
                                  "vocab_size",
                                  "attention.layer_norm_rms_epsilon",
                                  "rope.freq_base",
                                  "rope.dimension_count",
                                  "rope.scaling.type",
                                  "rope.scaling.factor",
                                  "rope.scale_linear",
                                  "rope.scaling.original_context_length",
                                  "rope.scaling.attn_factor",
                                  "rope.scaling.finetuned",
                                  "expert_count",
                                  "expert_used_count",
                                  "attention.causal"};
  if (f.layout.experts) out.emplace_back("expert_feed_forward_length");
  for (std::string_view k : f.keys) out.emplace_back(k);
  return out;
}

// KeyReader ---------------------------------------------------------------------------------------------

protocol::Result<std::optional<uint64_t>> KeyReader::uint(std::string_view key) {
  read_.insert(full(key));
  return file_.get_uint(full(key));
}

protocol::Result<std::optional<double>> KeyReader::real(std::string_view key) {
  read_.insert(full(key));
  return file_.get_float(full(key));
}

protocol::Result<std::optional<std::string>> KeyReader::string(std::string_view key) {
  read_.insert(full(key));
  return file_.get_string(full(key));
}

const GgufValue* KeyReader::value(std::string_view key) {
  read_.insert(full(key));
  return file_.find(full(key));
}

protocol::Result<std::optional<uint64_t>> KeyReader::uniform_uint(std::string_view key) {
  const GgufValue* v = value(key);
  if (!v || v->type != GgufType::array) return uint(key);
  if (v->ints.empty() || v->elem == GgufType::boolean || v->elem == GgufType::string || v->is_float())
    return protocol::make_error(
        protocol::ErrorCode::config_error,
        where() + ": " + full(key) + " must be an unsigned integer or an array of them");
  for (int64_t x : v->ints)
    if (x != v->ints[0] || x < 0)
      return protocol::make_error(protocol::ErrorCode::config_error,
                                  where() + ": " + full(key) +
                                      " differs between layers, which epd does not support (one value for "
                                      "every layer)");
  return std::optional<uint64_t>(static_cast<uint64_t>(v->ints[0]));
}

std::string KeyReader::unread_key() const {
  const std::string prefix = arch_ + ".";
  for (const auto& [key, value] : file_.metadata()) {
    (void)value;
    if (key.starts_with(prefix)) {
      if (!read_.contains(key)) return key;
      continue;
    }
    const bool inert =
        key.starts_with("general.") || key.starts_with("tokenizer.") || key.starts_with("quantize.");
    if (!inert && !read_.contains(key)) return key;
  }
  return {};
}

}  // namespace epd::model::families
