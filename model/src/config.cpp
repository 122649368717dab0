#include "epd/model/config.hpp"

#include <toml++/toml.h>
#include <fstream>
#include <sstream>

#include "epd/model/tokens.hpp"

namespace epd::model {
namespace {

using protocol::ErrorCode;
using protocol::make_error;

protocol::Error config_error(std::string detail) {
  return make_error(ErrorCode::config_error, std::move(detail));
}

ModelConfig tiny() {
  ModelConfig c;
  c.name = "tiny";
  return c;  // the struct defaults are the tiny preset
}

// 8 layers x 2 x 4 kv heads x 32 dims x 4 B = 8 KiB of KV per token: 4 MiB per 512-token prompt.
ModelConfig bench() {
  ModelConfig c;
  c.name = "bench";
  c.d_model = 256;
  c.layers = 8;
  c.heads = 8;
  c.kv_heads = 4;
  c.head_dim = 32;
  c.ffn = 768;
  c.max_seq = 2048;
  c.page_size = 16;
  c.patch_size = 16;
  c.encoder_layers = 2;
  c.max_image_patches = 256;
  c.seed = 2;
  return c;
}

template <class T>
bool read_uint(const toml::node& n, T& out, uint64_t max) {
  auto v = n.value<int64_t>();
  if (!v || *v < 0 || static_cast<uint64_t>(*v) > max) return false;
  out = static_cast<T>(*v);
  return true;
}

}  // namespace

protocol::Status validate(const ModelConfig& c) {
  auto bad = [](std::string what) -> protocol::Status { return config_error("model config: " + what); };
  const bool ckpt = !c.checkpoint.empty();
  if (!ckpt && c.vocab != kVocab)
    return bad("vocab must be " + std::to_string(kVocab) + " (256 bytes + BOS/EOS/IMAGE)");
  if (ckpt && (c.vocab < 2 || c.vocab > (1u << 22))) return bad("vocab must be in 2..4194304");
  if (c.threads == 0 || c.threads > 256) return bad("threads must be in 1..256");
  if (!ckpt && !c.mmproj.empty()) return bad("an mmproj needs a checkpoint (its language model)");
  if (c.d_model == 0 || c.d_model > 8192) return bad("d_model must be in 1..8192");
  if (c.layers == 0 || c.layers > 128) return bad("layers must be in 1..128");
  if (c.heads == 0 || c.heads > 256) return bad("heads must be in 1..256");
  if (c.kv_heads == 0 || c.heads % c.kv_heads != 0) return bad("kv_heads must divide heads");
  if (c.head_dim == 0 || c.head_dim % 2 != 0 || c.head_dim > 1024)
    return bad("head_dim must be even, 2..1024");
  if (c.ffn == 0 || c.ffn > 65536) return bad("ffn must be in 1..65536");
  if (c.max_seq == 0 || c.max_seq > 65536) return bad("max_seq must be in 1..65536");
  if (c.page_size == 0 || c.page_size > kMaxPageSize)
    return bad("page_size must be in 1.." + std::to_string(kMaxPageSize));
  if (c.patch_size == 0 || c.patch_size > 256) return bad("patch_size must be in 1..256");
  if (c.encoder_layers > 64) return bad("encoder_layers must be in 0..64");
  if (c.max_image_patches == 0 || c.max_image_patches > 16384)
    return bad("max_image_patches must be in 1..16384");
  if (!(c.rope_theta > 1.0f && c.rope_theta < 1e9f)) return bad("rope_theta must be in (1, 1e9)");
  if (!(c.norm_eps > 0.0f && c.norm_eps < 1.0f)) return bad("norm_eps must be in (0, 1)");
  // Weights held as floats are bounded: the reference model's (made in memory, 1 G of them) and a Hugging
  // Face checkpoint's (converted to f32 once, 4 G = 16 GiB). A GGUF file's tensors are used in place, each
  // one present with its shape, so its weights are the file's size and each dimension is bounded above: a
  // 7 B or 14 B file is served as llama.cpp serves it.
  if (ckpt && c.checkpoint.ends_with(".gguf")) return {};
  const uint64_t per_layer =
      uint64_t{c.d_model} * c.head_dim * (2 * c.heads + 2 * c.kv_heads) + 3ull * c.d_model * c.ffn;
  const uint64_t limit = uint64_t{1} << (ckpt ? 32 : 30);
  if (per_layer * (c.layers + (ckpt ? 0 : c.encoder_layers)) + (ckpt ? 2ull * c.vocab * c.d_model : 0) >
      limit)
    return bad(ckpt ? "model too large (> 4G weights held as f32)" : "model too large (> 1G weights)");
  return {};
}

protocol::Result<ModelConfig> preset(std::string_view name) {
  if (name == "tiny") return tiny();
  if (name == "bench") return bench();
  return config_error("unknown model preset '" + std::string(name) + "' (known: tiny, bench)");
}

protocol::Result<ModelConfig> parse_model_config(std::string_view text, std::string_view source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << source << ": TOML parse error: " << e.description() << " at line " << e.source().begin.line;
    return config_error(os.str());
  }
  const toml::table* m = root["model"].as_table();
  if (!m) return config_error(std::string(source) + ": missing [model] table");

  ModelConfig c;
  if (auto p = (*m)["preset"].value<std::string>()) {
    auto base = preset(*p);
    if (!base) return base.error();
    c = *base;
  }
  for (const auto& [key, node] : *m) {
    const std::string_view k = key.str();
    bool ok = true;
    if (k == "preset") {
      ok = node.is_string();
    } else if (k == "name") {
      auto v = node.value<std::string>();
      ok = v.has_value();
      if (ok) c.name = *v;
    } else if (k == "seed") {
      auto v = node.value<int64_t>();  // TOML integers are signed 64-bit
      ok = v && *v >= 0;
      if (ok) c.seed = static_cast<uint64_t>(*v);
    } else if (k == "rope_theta" || k == "norm_eps") {
      auto v = node.value<double>();
      ok = v.has_value();
      if (ok) (k == "rope_theta" ? c.rope_theta : c.norm_eps) = static_cast<float>(*v);
    } else {
      uint32_t* field = nullptr;
      if (k == "vocab")
        field = &c.vocab;
      else if (k == "d_model")
        field = &c.d_model;
      else if (k == "layers")
        field = &c.layers;
      else if (k == "heads")
        field = &c.heads;
      else if (k == "kv_heads")
        field = &c.kv_heads;
      else if (k == "head_dim")
        field = &c.head_dim;
      else if (k == "ffn")
        field = &c.ffn;
      else if (k == "max_seq")
        field = &c.max_seq;
      else if (k == "page_size")
        field = &c.page_size;
      else if (k == "patch_size")
        field = &c.patch_size;
      else if (k == "encoder_layers")
        field = &c.encoder_layers;
      else if (k == "max_image_patches")
        field = &c.max_image_patches;
      else
        return config_error(std::string(source) + ": unknown key model." + std::string(k));
      ok = read_uint(node, *field, UINT32_MAX);
    }
    if (!ok) return config_error(std::string(source) + ": bad value for model." + std::string(k));
  }
  if (auto st = validate(c); !st) return config_error(std::string(source) + ": " + st.error().detail);
  return c;
}

protocol::Result<ModelConfig> load_model_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return config_error("cannot open model config '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path);
}

std::string to_toml(const ModelConfig& c) {
  std::ostringstream os;
  os << "[model]\n"
     << "name = \"" << c.name << "\"\n"
     << "vocab = " << c.vocab << "\n"
     << "d_model = " << c.d_model << "\n"
     << "layers = " << c.layers << "\n"
     << "heads = " << c.heads << "\n"
     << "kv_heads = " << c.kv_heads << "\n"
     << "head_dim = " << c.head_dim << "\n"
     << "ffn = " << c.ffn << "\n"
     << "max_seq = " << c.max_seq << "\n"
     << "page_size = " << c.page_size << "\n"
     << "patch_size = " << c.patch_size << "\n"
     << "encoder_layers = " << c.encoder_layers << "\n"
     << "max_image_patches = " << c.max_image_patches << "\n"
     << "rope_theta = " << c.rope_theta << "\n"
     << "norm_eps = " << c.norm_eps << "\n"
     << "seed = " << c.seed << "\n";
  return os.str();
}

}  // namespace epd::model
