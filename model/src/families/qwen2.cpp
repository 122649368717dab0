// Qwen2 and Qwen2.5 (and Qwen2.5-Coder; llama.cpp's LLM_ARCH_QWEN2): Llama's blocks with Q/K/V biases and
// rotation in halves (NEOX); an optional bias on the LM head.
#include "families/family.hpp"

namespace epd::model::families {

const DecoderFamily kQwen2{
    .name = "qwen2",
    .gguf_arch = "qwen2",
    .hf_model_type = "",
    .examples = "Qwen2.5-0.5B...14B-Instruct, Qwen2.5-Coder",
    .rope_style = detail::RopeStyle::neox,
    .layout = {.output_bias = true},
    .read_keys = no_own_keys,
    .keys = {},
    .hf_tensor = nullptr,
};

}  // namespace epd::model::families
