// Gemma 3 text models (gemma-3-270m/1b, and the language model of gemma-3-4b/12b/27b; llama.cpp's
// LLM_ARCH_GEMMA3): token embeddings scaled by sqrt(d_model), QK-norm, RMSNorm after attention and after
// the feed-forward (post norms), GeGLU with GELU's tanh approximation, rotation in halves (NEOX), and
// sliding-window layers (five of every six by default) with a RoPE base of their own; the global layers
// take the file's RoPE scaling (linear, x8 for 4b and up), the sliding ones none. The query scale is
// 1/sqrt(head_dim), except for the 62-layer 27b (1/sqrt(d_model / heads)), as in Google's reference code.
// The norms are stored with Gemma's +1 already added by llama.cpp's converter.
#include <cmath>

#include "families/family.hpp"

namespace epd::model::families {
namespace {

using protocol::ErrorCode;

protocol::Status gemma3_keys(KeyReader& keys, const ModelConfig& cfg, detail::DecoderArch& arch) {
  arch.embed_scale = std::sqrt(static_cast<float>(cfg.d_model));
  arch.activation = detail::Activation::gelu_tanh;
  arch.attn_scale = cfg.layers == 62 ? 1.0f / std::sqrt(static_cast<float>(cfg.d_model / cfg.heads))
                                     : 1.0f / std::sqrt(static_cast<float>(cfg.head_dim));
  auto cap = keys.real("final_logit_softcapping");
  if (!cap) return cap.error();
  arch.final_logit_softcap = static_cast<float>(cap->value_or(0.0));
  auto window = keys.uint("attention.sliding_window");
  if (!window) return window.error();
  if (!window->has_value() || **window == 0) return {};
  if (**window > UINT32_MAX)
    return protocol::make_error(
        ErrorCode::config_error,
        keys.where() + ": " + keys.full("attention.sliding_window") + " out of range");
  arch.sliding_window = static_cast<uint32_t>(**window);
  // The pattern: one flag per layer, or every n-th layer global (llama.cpp's set_swa_pattern, default 6).
  arch.swa_layers.assign(cfg.layers, 0);
  const GgufValue* pattern = keys.value("attention.sliding_window_pattern");
  if (pattern && pattern->type == GgufType::array) {
    if (pattern->ints.size() != cfg.layers)
      return protocol::make_error(ErrorCode::config_error,
                                  keys.where() + ": " + keys.full("attention.sliding_window_pattern") +
                                      " has " + std::to_string(pattern->ints.size()) + " entries for " +
                                      std::to_string(cfg.layers) + " layers");
    for (uint32_t l = 0; l < cfg.layers; ++l) arch.swa_layers[l] = pattern->ints[l] != 0;
  } else {
    auto n = keys.uint("attention.sliding_window_pattern");
    if (!n) return n.error();
    const uint64_t every = n->value_or(6);
    for (uint32_t l = 0; l < cfg.layers; ++l) arch.swa_layers[l] = every == 0 || l % every < every - 1;
  }
  auto base = keys.real("rope.freq_base_swa");
  if (!base) return base.error();
  arch.rope_swa = arch.rope;
  arch.rope_swa.base = base->value_or(10000.0);
  arch.rope_swa.freq_scale = 1.0;  // llama.cpp's rope_freq_scale_train_swa: the sliding layers never scale
  return {};
}

constexpr std::string_view kKeys[] = {"final_logit_softcapping", "attention.sliding_window",
                                      "attention.sliding_window_pattern", "rope.freq_base_swa"};

}  // namespace

const DecoderFamily kGemma3{
    .name = "gemma3",
    .gguf_arch = "gemma3",
    .hf_model_type = "",
    .examples = "gemma-3-270m-it, gemma-3-1b-it, gemma-3-4b/12b/27b-it (text)",
    .rope_style = detail::RopeStyle::neox,
    .layout = {.qk_norm = true, .post_norms = true},
    .read_keys = gemma3_keys,
    .keys = kKeys,
    .hf_tensor = nullptr,
};

}  // namespace epd::model::families
