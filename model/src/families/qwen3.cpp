// Qwen3 dense models (llama.cpp's LLM_ARCH_QWEN3): Llama's blocks with an RMSNorm over every query and key
// head before the rotation (QK-norm), rotation in halves (NEOX).
#include "families/family.hpp"

namespace epd::model::families {

const DecoderFamily kQwen3{
    .name = "qwen3",
    .gguf_arch = "qwen3",
    .hf_model_type = "",
    .examples = "Qwen3-0.6B...32B",
    .rope_style = detail::RopeStyle::neox,
    .layout = {.qk_norm = true},
    .read_keys = no_own_keys,
    .keys = {},
    .hf_tensor = nullptr,
};

}  // namespace epd::model::families
