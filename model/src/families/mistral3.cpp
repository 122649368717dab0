// Mistral 3 text models (Mistral-Small-3.1/3.2, Ministral 3; llama.cpp's LLM_ARCH_MISTRAL3): Llama's blocks
// with YaRN parameters of their own. The attention temperature some of them carry (queries scaled by a
// factor growing with the position) is refused until the decoder learns it.
#include <cmath>

#include "families/family.hpp"

namespace epd::model::families {
namespace {

protocol::Status mistral3_keys(KeyReader& keys, const ModelConfig&, detail::DecoderArch& arch) {
  using protocol::ErrorCode;
  for (auto [key, field] : {std::pair{"rope.scaling.yarn_beta_fast", &arch.rope.beta_fast},
                            std::pair{"rope.scaling.yarn_beta_slow", &arch.rope.beta_slow}}) {
    auto v = keys.real(key);
    if (!v) return v.error();
    if (v->has_value()) *field = **v;
  }
  auto log_mul = keys.real("rope.scaling.yarn_log_multiplier");
  if (!log_mul) return log_mul.error();
  if (log_mul->has_value() && **log_mul != 0.0 && arch.rope.ext_factor != 0.0) {
    // llama_context's YaRN attention factor becomes get_mscale(factor, 1) / get_mscale(factor, log_mul)
    // (mscale 1); the loader set it to get_mscale(factor, 1) already, so the log multiplier divides.
    const double factor = 1.0 / arch.rope.freq_scale;
    if (factor > 1.0) arch.rope.attn_factor /= 0.1 * **log_mul * std::log(factor) + 1.0;
  }
  auto temp = keys.real("attention.temperature_scale");
  if (!temp) return temp.error();
  if (temp->has_value() && **temp != 0.0)
    return protocol::make_error(ErrorCode::config_error,
                                keys.where() + ": " + keys.full("attention.temperature_scale") +
                                    " (attention temperature tuning) is not supported");
  return {};
}

constexpr std::string_view kKeys[] = {"rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
                                      "rope.scaling.yarn_log_multiplier", "attention.temperature_scale"};

}  // namespace

const DecoderFamily kMistral3{
    .name = "mistral3",
    .gguf_arch = "mistral3",
    .hf_model_type = "",
    .examples = "Mistral-Small-3.1/3.2-24B, Ministral-3",
    .rope_style = detail::RopeStyle::interleaved,
    .layout = {.out_bias = true, .ffn_biases = true, .rope_factors = BlockLayout::RopeFactors::freqs},
    .read_keys = mistral3_keys,
    .keys = kKeys,
    .hf_tensor = nullptr,
};

}  // namespace epd::model::families
