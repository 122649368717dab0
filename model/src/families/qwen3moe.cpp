// Qwen3 mixture-of-experts models (Qwen3-30B-A3B, Qwen3-235B-A22B; llama.cpp's LLM_ARCH_QWEN3MOE): Qwen3's
// attention (QK-norm, NEOX) and, in every block, a router choosing each row's top-k experts by softmax,
// their weights renormalised to sum to 1, each expert a SwiGLU of its own.
#include "families/family.hpp"

namespace epd::model::families {
namespace {

protocol::Status no_keys(KeyReader&, const ModelConfig&, detail::DecoderArch& arch) {
  arch.norm_expert_weights = true;  // build_moe_ffn's norm_w for this architecture
  return {};
}

}  // namespace

const DecoderFamily kQwen3Moe{
    .name = "qwen3moe",
    .gguf_arch = "qwen3moe",
    .hf_model_type = "",
    .examples = "Qwen3-30B-A3B(-Instruct-2507), Qwen3-Coder-30B-A3B",
    .rope_style = detail::RopeStyle::neox,
    .layout = {.qk_norm = true, .experts = true},
    .read_keys = no_keys,
    .keys = {},
    .hf_tensor = nullptr,
};

}  // namespace epd::model::families
