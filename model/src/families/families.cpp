// The registry of decoder families: one line per family.
#include "families/family.hpp"

namespace epd::model::families {

std::span<const DecoderFamily* const> decoder_families() {
  static const DecoderFamily* const all[] = {&kLlama};
  return all;
}

const DecoderFamily* family_by_gguf_arch(std::string_view arch) {
  for (const DecoderFamily* f : decoder_families())
    if (f->gguf_arch == arch) return f;
  return nullptr;
}

const DecoderFamily* family_by_hf_model_type(std::string_view model_type) {
  for (const DecoderFamily* f : decoder_families())
    if (f->hf_model_type == model_type) return f;
  return nullptr;
}

std::string family_names() {
  std::string out;
  for (const DecoderFamily* f : decoder_families()) out += (out.empty() ? "" : ", ") + std::string(f->name);
  return out;
}

}  // namespace epd::model::families
