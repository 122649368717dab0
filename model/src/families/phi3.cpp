// Phi-3, Phi-3.5 and Phi-4-mini (llama.cpp's LLM_ARCH_PHI3): fused QKV (attn_qkv) and fused gate/up
// (ffn_up holds both), rotation in halves (NEOX), possibly over part of each head (Phi-4-mini), and
// LongRoPE's frequency factors (rope_factors_long / _short) with their attention factor. The sliding window
// some files declare is not applied, as llama.cpp does not apply it either (its loader turns it off).
#include "families/family.hpp"

namespace epd::model::families {
namespace {

protocol::Status phi3_keys(KeyReader& keys, const ModelConfig&, detail::DecoderArch&) {
  auto window = keys.uint("attention.sliding_window");  // read to be ignored, as llama.cpp ignores it
  if (!window) return window.error();
  return {};
}

constexpr std::string_view kKeys[] = {"attention.sliding_window"};

}  // namespace

const DecoderFamily kPhi3{
    .name = "phi3",
    .gguf_arch = "phi3",
    .hf_model_type = "",
    .examples = "Phi-3-mini, Phi-3.5-mini-instruct, Phi-4-mini-instruct",
    .rope_style = detail::RopeStyle::neox,
    .layout = {.fused_gate_up = true, .rope_factors = BlockLayout::RopeFactors::long_short},
    .read_keys = phi3_keys,
    .keys = kKeys,
    .hf_tensor = nullptr,
};

}  // namespace epd::model::families
