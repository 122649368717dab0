// Reading a Llama-family checkpoint: its shape from config.json or GGUF metadata, its tensors from
// safetensors or GGUF, each checked by name and shape and converted to f32.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "epd/model/gguf.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/safetensors.hpp"
#include "llama_weights.hpp"

namespace epd::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using protocol::ErrorCode;
using protocol::make_error;

constexpr uint32_t kMaxContext = 65536;  // ModelConfig's max_seq bound (sizes the RoPE table)

protocol::Error bad(const std::string& where, const std::string& detail) {
  return make_error(ErrorCode::config_error, where + ": " + detail);
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_gguf(const std::string& path) {
  return ends_with(path, ".gguf");
}

// config.json of a directory, or beside a .safetensors file.
fs::path hf_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
}

// Fills the shape fields shared by both formats and checks them against ModelConfig's limits.
protocol::Status finish(ModelConfig& c, const std::string& where, uint64_t context) {
  c.max_seq = static_cast<uint32_t>(std::clamp<uint64_t>(context, 1, kMaxContext));
  if (c.heads == 0 || c.kv_heads == 0 || c.heads % c.kv_heads != 0)
    return bad(where, "heads (" + std::to_string(c.heads) + ") must be a multiple of kv heads (" +
                          std::to_string(c.kv_heads) + ")");
  if (auto st = validate(c); !st) return bad(where, st.error().detail);
  return {};
}

template <class T>
bool json_uint(const json& j, const char* key, T& out, bool required) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return !required;
  if (!it->is_number_unsigned() || it->get<uint64_t>() > UINT32_MAX) return false;
  out = static_cast<T>(it->get<uint64_t>());
  return true;
}

protocol::Result<ModelConfig> read_hf_config(const std::string& path) {
  const fs::path file = hf_dir(path) / "config.json";
  const std::string where = file.string();
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot open " + where);
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad(where, "not a JSON object");
  const std::string type = j.value("model_type", std::string());
  if (type != "llama")
    return bad(where, "unsupported architecture '" + type + "' (model_type; supported: llama)");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    return bad(where, "unsupported hidden_act (supported: silu)");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    return bad(where, "rope_scaling is not supported");
  for (const char* k : {"attention_bias", "mlp_bias"})
    if (j.contains(k) && j[k] != false) return bad(where, std::string(k) + " is not supported");

  ModelConfig c;
  c.name = hf_dir(path).filename().string();
  c.checkpoint = path;
  uint64_t context = 2048;
  c.kv_heads = 0;
  c.head_dim = 0;
  const bool ok = json_uint(j, "vocab_size", c.vocab, true) && json_uint(j, "hidden_size", c.d_model, true) &&
                  json_uint(j, "num_hidden_layers", c.layers, true) &&
                  json_uint(j, "num_attention_heads", c.heads, true) &&
                  json_uint(j, "num_key_value_heads", c.kv_heads, false) &&
                  json_uint(j, "head_dim", c.head_dim, false) &&
                  json_uint(j, "intermediate_size", c.ffn, true) &&
                  json_uint(j, "max_position_embeddings", context, false);
  if (!ok)
    return bad(where,
               "needs unsigned integers vocab_size, hidden_size, num_hidden_layers, "
               "num_attention_heads, intermediate_size (and optionally num_key_value_heads, head_dim, "
               "max_position_embeddings)");
  if (c.heads == 0) return bad(where, "num_attention_heads must be positive");
  if (c.kv_heads == 0) c.kv_heads = c.heads;
  if (c.head_dim == 0) c.head_dim = c.d_model / c.heads;
  if (c.head_dim * c.heads != c.d_model && !j.contains("head_dim"))
    return bad(where, "hidden_size is not a multiple of num_attention_heads");
  c.rope_theta = static_cast<float>(j.value("rope_theta", 10000.0));
  c.norm_eps = static_cast<float>(j.value("rms_norm_eps", 1e-6));
  if (auto st = finish(c, where, context); !st) return st.error();
  return c;
}

protocol::Result<ModelConfig> read_gguf_config(const GgufFile& g) {
  const std::string& where = "GGUF " + g.name();
  auto arch = g.get_string("general.architecture");
  if (!arch) return arch.error();
  if (!arch->has_value()) return bad(where, "no general.architecture");
  if (**arch != "llama") return bad(where, "unsupported architecture '" + **arch + "' (supported: llama)");
  auto scaling = g.get_string("llama.rope.scaling.type");
  if (!scaling) return scaling.error();
  if (scaling->has_value() && **scaling != "none") return bad(where, "RoPE scaling is not supported");

  ModelConfig c;
  auto name = g.get_string("general.name");
  c.name = name && name->has_value() ? **name : fs::path(g.name()).stem().string();
  c.checkpoint = g.name();
  uint64_t context = 2048;
  // Required and optional integer keys, each checked for its type.
  struct Key {
    const char* name;
    bool required;
    uint64_t value;
  };
  Key keys[] = {{"llama.embedding_length", true, 0},
                {"llama.block_count", true, 0},
                {"llama.feed_forward_length", true, 0},
                {"llama.attention.head_count", true, 0},
                {"llama.attention.head_count_kv", false, 0},
                {"llama.context_length", false, 0},
                {"llama.attention.key_length", false, 0},
                {"llama.rope.dimension_count", false, 0},
                {"llama.vocab_size", false, 0}};
  for (Key& k : keys) {
    auto v = g.get_uint(k.name);
    if (!v) return v.error();
    if (v->has_value()) {
      if (**v > UINT32_MAX) return bad(where, std::string(k.name) + " out of range");
      k.value = **v;
    } else if (k.required) {
      return bad(where, std::string("missing metadata key ") + k.name);
    }
  }
  c.d_model = static_cast<uint32_t>(keys[0].value);
  c.layers = static_cast<uint32_t>(keys[1].value);
  c.ffn = static_cast<uint32_t>(keys[2].value);
  c.heads = static_cast<uint32_t>(keys[3].value);
  c.kv_heads = keys[4].value ? static_cast<uint32_t>(keys[4].value) : c.heads;
  if (keys[5].value) context = keys[5].value;
  if (c.heads == 0) return bad(where, "llama.attention.head_count must be positive");
  c.head_dim = keys[6].value ? static_cast<uint32_t>(keys[6].value) : c.d_model / c.heads;
  if (keys[7].value && keys[7].value != c.head_dim)
    return bad(where, "partial RoPE (llama.rope.dimension_count != head dim) is not supported");
  if (keys[8].value) {
    c.vocab = static_cast<uint32_t>(keys[8].value);
  } else {
    const TensorRef* emb = g.tensor("token_embd.weight");
    if (!emb || emb->shape.size() != 2 || emb->shape[0] > UINT32_MAX)
      return bad(where, "no llama.vocab_size and no 2-D token_embd.weight to take it from");
    c.vocab = static_cast<uint32_t>(emb->shape[0]);
  }
  auto theta = g.get_float("llama.rope.freq_base");
  auto eps = g.get_float("llama.attention.layer_norm_rms_epsilon");
  if (!theta) return theta.error();
  if (!eps) return eps.error();
  c.rope_theta = static_cast<float>(theta->value_or(10000.0));
  if (!eps->has_value()) return bad(where, "missing metadata key llama.attention.layer_norm_rms_epsilon");
  c.norm_eps = static_cast<float>(**eps);
  if (auto st = finish(c, where, context); !st) return st.error();
  return c;
}

// One tensor by name, checked against the expected shape (outermost first) and converted to f32.
using Lookup = std::function<const TensorRef*(const std::string&)>;

protocol::Status take(const Lookup& find, const std::string& where, const std::string& name,
                      std::vector<uint64_t> shape, std::vector<float>& out) {
  const TensorRef* t = find(name);
  if (!t) return bad(where, "missing tensor " + name);
  if (t->shape != shape) {
    auto show = [](const std::vector<uint64_t>& s) {
      std::string r = "[";
      for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
      return r + "]";
    };
    return bad(where, "tensor " + name + " has shape " + show(t->shape) + ", expected " + show(shape));
  }
  out.resize(t->elements());
  return tensor_to_f32(*t, out);
}

// Hugging Face rows of each head are [first halves | second halves] of the rotated pairs; llama.cpp's
// converter (and epd) interleave them: row 2i takes row i, row 2i+1 takes row i + head_dim/2.
void interleave_rope_rows(std::vector<float>& w, uint32_t heads, uint32_t hd, uint32_t in) {
  std::vector<float> src = w;
  const uint32_t half = hd / 2;
  for (uint32_t h = 0; h < heads; ++h)
    for (uint32_t i = 0; i < half; ++i)
      for (uint32_t j = 0; j < 2; ++j)
        std::copy_n(&src[(size_t{h} * hd + j * half + i) * in], in, &w[(size_t{h} * hd + 2 * i + j) * in]);
}

struct Names {
  std::string emb, norm, head;
  std::function<std::string(uint32_t, const char*)> layer;  // (layer, role) -> tensor name
};

protocol::Result<LlamaWeights> load_with(const ModelConfig& c, const Lookup& find, const std::string& where,
                                         const Names& n, bool hf, bool tied) {
  const uint64_t d = c.d_model, q = uint64_t{c.heads} * c.head_dim, kv = uint64_t{c.kv_heads} * c.head_dim;
  LlamaWeights w;
  if (auto st = take(find, where, n.emb, {c.vocab, d}, w.tok_emb); !st) return st.error();
  if (auto st = take(find, where, n.norm, {d}, w.final_norm); !st) return st.error();
  if (!tied)
    if (auto st = take(find, where, n.head, {c.vocab, d}, w.lm_head); !st) return st.error();
  w.layers.resize(c.layers);
  for (uint32_t l = 0; l < c.layers; ++l) {
    LlamaLayer& L = w.layers[l];
    const struct {
      const char* role;
      std::vector<uint64_t> shape;
      std::vector<float>* out;
    } parts[] = {{"attn_norm", {d}, &L.attn_norm},
                 {"q", {q, d}, &L.wq},
                 {"k", {kv, d}, &L.wk},
                 {"v", {kv, d}, &L.wv},
                 {"o", {d, q}, &L.wo},
                 {"ffn_norm", {d}, &L.ffn_norm},
                 {"gate", {c.ffn, d}, &L.w_gate},
                 {"up", {c.ffn, d}, &L.w_up},
                 {"down", {d, c.ffn}, &L.w_down}};
    for (const auto& p : parts)
      if (auto st = take(find, where, n.layer(l, p.role), p.shape, *p.out); !st) return st.error();
    if (hf) {
      interleave_rope_rows(L.wq, c.heads, c.head_dim, c.d_model);
      interleave_rope_rows(L.wk, c.kv_heads, c.head_dim, c.d_model);
    }
  }
  return w;
}

}  // namespace

bool is_checkpoint_path(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || is_gguf(path) || ends_with(path, ".safetensors");
}

protocol::Result<ModelConfig> read_checkpoint_config(const std::string& path) {
  if (!is_gguf(path)) return read_hf_config(path);
  auto g = GgufFile::open(path);
  if (!g) return g.error();
  return read_gguf_config(*g);
}

protocol::Result<LlamaWeights> load_llama_weights(const ModelConfig& cfg) {
  const std::string& path = cfg.checkpoint;
  auto shape = read_checkpoint_config(path);
  if (!shape) return shape.error();
  // The caller's config must describe this checkpoint (only page size and threads are its own).
  ModelConfig expect = *shape;
  expect.name = cfg.name;
  expect.page_size = cfg.page_size;
  expect.threads = cfg.threads;
  expect.max_seq = std::min(expect.max_seq, cfg.max_seq);
  if (!(expect == cfg)) return bad(path, "the model config does not match the checkpoint's shape");

  if (is_gguf(path)) {
    auto g = GgufFile::open(path);
    if (!g) return g.error();
    const GgufFile& file = *g;
    const bool tied = file.tensor("output.weight") == nullptr;
    Names n{
        "token_embd.weight", "output_norm.weight", "output.weight", [](uint32_t l, const char* role) {
          static const std::pair<std::string_view, const char*> map[] = {
              {"attn_norm", "attn_norm"}, {"q", "attn_q"},          {"k", "attn_k"},      {"v", "attn_v"},
              {"o", "attn_output"},       {"ffn_norm", "ffn_norm"}, {"gate", "ffn_gate"}, {"up", "ffn_up"},
              {"down", "ffn_down"}};
          const char* g = role;
          for (const auto& [k, v] : map)
            if (k == role) g = v;
          return "blk." + std::to_string(l) + "." + g + ".weight";
        }};
    return load_with(
        cfg, [&](const std::string& name) { return file.tensor(name); }, "GGUF " + path, n, false, tied);
  }

  std::string st_path = path;
  auto st = SafetensorsCheckpoint::open(st_path);
  if (!st) return st.error();
  const SafetensorsCheckpoint& file = *st;
  std::ifstream in(hf_dir(path) / "config.json", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, false);
  const bool tied = j.is_object() && j.value("tie_word_embeddings", false);
  Names n{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
          [](uint32_t l, const char* role) {
            static const std::pair<std::string_view, const char*> map[] = {
                {"attn_norm", "input_layernorm"}, {"q", "self_attn.q_proj"},
                {"k", "self_attn.k_proj"},        {"v", "self_attn.v_proj"},
                {"o", "self_attn.o_proj"},        {"ffn_norm", "post_attention_layernorm"},
                {"gate", "mlp.gate_proj"},        {"up", "mlp.up_proj"},
                {"down", "mlp.down_proj"}};
            const char* h = role;
            for (const auto& [k, v] : map)
              if (k == role) h = v;
            return "model.layers." + std::to_string(l) + "." + h + ".weight";
          }};
  return load_with(
      cfg, [&](const std::string& name) { return file.tensor(name); }, path, n, true, tied);
}

}  // namespace epd::model
