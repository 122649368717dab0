// Reading a checkpoint of a decoder family (families/): its shape from config.json or GGUF metadata, its
// tensors from safetensors or GGUF by the family's names, each checked by name and shape; GGUF matrices stay
// in place (or in ggml's shared repacked copy), the others become f32.
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "decoder/checkpoint_tensors.hpp"
#include "decoder/gguf_model.hpp"
#include "decoder/loader.hpp"
#include "epd/model/gguf.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/safetensors.hpp"
#include "families/family.hpp"
#include "kernels/ggml/ggml_cpu.hpp"

namespace epd::model {
namespace {

namespace fs = std::filesystem;
using detail::bad;
using detail::DecoderLayer;
using detail::DecoderWeights;
using detail::finish_shape;
using detail::Lookup;
using detail::MatrixSource;
using detail::take_f32;
using detail::take_matrix;
using families::DecoderFamily;
using families::Role;
using nlohmann::json;
using protocol::ErrorCode;
using protocol::make_error;

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
  // Typed reads that never throw: a key of the wrong type is an error, not an exception.
  const auto mt = j.find("model_type");
  const std::string type = mt != j.end() && mt->is_string() ? mt->get<std::string>() : std::string();
  if (!families::family_by_hf_model_type(type))
    return bad(where, "unsupported architecture '" + type +
                          "' (model_type; supported: " + families::family_names() + ")");
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
  for (const auto& [key, field, fallback] :
       {std::tuple{"rope_theta", &c.rope_theta, 10000.0}, std::tuple{"rms_norm_eps", &c.norm_eps, 1e-6}}) {
    const auto it = j.find(key);
    if (it != j.end() && !it->is_null() && !it->is_number())
      return bad(where, std::string(key) + " must be a number");
    *field = static_cast<float>(it != j.end() && it->is_number() ? it->get<double>() : fallback);
  }
  if (auto st = finish_shape(c, where, context); !st) return st.error();
  return c;
}

using Namer = std::string (*)(Role, uint32_t);

protocol::Result<DecoderWeights> load_with(const ModelConfig& c, const MatrixSource& src, Namer name,
                                           bool tied) {
  const uint64_t d = c.d_model, q = uint64_t{c.heads} * c.head_dim, kv = uint64_t{c.kv_heads} * c.head_dim;
  DecoderWeights w;
  w.arch.rope.base = c.rope_theta;
  w.ggml = src.ggml;
  if (auto st = take_matrix(src, name(Role::token_embedding, 0), c.vocab, d, 0, 0, w.tok_emb); !st)
    return st.error();
  if (auto st = take_f32(src.find, src.where, name(Role::output_norm, 0), {d}, w.final_norm); !st)
    return st.error();
  if (!tied)
    if (auto st = take_matrix(src, name(Role::output, 0), c.vocab, d, 0, 0, w.lm_head); !st)
      return st.error();
  w.layers.resize(c.layers);
  for (uint32_t l = 0; l < c.layers; ++l) {
    DecoderLayer& L = w.layers[l];
    for (const auto& [role, out] :
         {std::pair{Role::attn_norm, &L.attn_norm}, std::pair{Role::ffn_norm, &L.ffn_norm}})
      if (auto st = take_f32(src.find, src.where, name(role, l), {d}, *out); !st) return st.error();
    const struct {
      Role role;
      uint64_t rows, cols;
      uint32_t rope_heads;
      detail::WeightMatrix* out;
    } parts[] = {{Role::q, q, d, c.heads, &L.wq.w},      {Role::k, kv, d, c.kv_heads, &L.wk.w},
                 {Role::v, kv, d, 0, &L.wv.w},           {Role::o, d, q, 0, &L.wo.w},
                 {Role::gate, c.ffn, d, 0, &L.w_gate.w}, {Role::up, c.ffn, d, 0, &L.w_up.w},
                 {Role::down, d, c.ffn, 0, &L.w_down.w}};
    for (const auto& p : parts)
      if (auto st = take_matrix(src, name(p.role, l), p.rows, p.cols, p.rope_heads, c.head_dim, *p.out); !st)
        return st.error();
  }
  return w;
}

// Every matrix ggml would repack on this CPU is multiplied in its repacked layout, from the host's shared
// copy (kernels/ggml/packed_weights.hpp). The embeddings stay as they are: rows are looked up, not
// multiplied (a tied LM head multiplies them unpacked). EPD_GGML_REPACK=0 keeps every matrix as the file has
// it.
protocol::Status pack(DecoderWeights& w, const GgufFile& file, const ggml::Library& lib) {
  if (const char* e = std::getenv("EPD_GGML_REPACK"); e && std::string_view(e) == "0") return {};
  // The tensor of each matrix, found again by its bytes: a matrix is a whole tensor, or one expert's rows
  // of a 3-D one (packed as a tensor of its own, named by its expert).
  std::map<const std::byte*, const TensorRef*> by_data;
  for (const TensorRef& t : file.tensors()) by_data[t.bytes.data()] = &t;
  std::deque<TensorRef> slices;  // stable addresses for PackedWeights::Matrix
  std::vector<ggml::PackedWeights::Matrix> todo;
  std::vector<detail::WeightMatrix*> targets;
  detail::for_each_layer_matrix(w, [&](detail::WeightMatrix& m) {
    if (m.type() == TensorType::f32) return;
    auto t = by_data.upper_bound(m.row(0));
    if (t == by_data.begin()) return;
    const TensorRef& whole = *(--t)->second;
    const std::span<const std::byte> bytes(m.row(0), m.rows() * m.row_bytes());
    if (bytes.data() + bytes.size() > whole.bytes.data() + whole.bytes.size()) return;
    const TensorRef* tensor = &whole;
    if (bytes.size() != whole.bytes.size()) {
      const auto expert = static_cast<uint64_t>(bytes.data() - whole.bytes.data()) / bytes.size();
      slices.push_back(
          {whole.name + "[" + std::to_string(expert) + "]", m.type(), {m.rows(), m.cols()}, bytes});
      tensor = &slices.back();
    }
    if (auto p = lib.packing(m.type(), static_cast<int64_t>(m.rows()), static_cast<int64_t>(m.cols()))) {
      todo.push_back({tensor, *p});
      targets.push_back(&m);
    }
  });
  auto packed = ggml::PackedWeights::build(file.name(), todo, lib, ggml::PackedWeights::default_cache_dir());
  if (!packed) return packed.error();
  for (size_t i = 0; i < targets.size(); ++i)
    targets[i]->use_packed((*packed)->data(i), &(*packed)->packing(i));
  w.packed = std::move(*packed);
  return {};
}

// Which matrices a decode batch may multiply with ggml's batch kernels without changing any sequence's bits.
void check_batch_kernels(DecoderWeights& w, const ggml::Library& lib) {
  auto check = [&](detail::WeightMatrix& m) {
    if (m.type() == TensorType::f32) return;
    const auto n = static_cast<int64_t>(m.cols());
    // f16 rows go one at a time through epd's own dot product (weight_matrix.cpp), which no batch kernel
    // of ggml's is checked against.
    m.set_batch_agrees(
        m.type() != TensorType::f16 &&
        (m.packing() ? lib.batch_agrees(*m.packing(), m.type(), n) : lib.batch_agrees(m.type(), n)));
  };
  detail::for_each_layer_matrix(w, check);
  if (!w.lm_head.rows()) check(w.tok_emb);  // a tied head multiplies by the embeddings
}

}  // namespace

namespace detail {

std::string describe_kernels(const DecoderWeights& w) {
  size_t total = 0, packed = 0, batched = 0;
  std::map<std::string, size_t> names;
  auto count = [&](const WeightMatrix& m) {
    ++total;
    batched += m.batch_agrees();
    if (const ggml::Packing* p = m.packing()) {
      ++packed;
      ++names[p->name];
    }
  };
  for_each_layer_matrix(w, count);
  if (!w.lm_head.rows()) count(w.head());
  std::string out = w.ggml ? "ggml-cpu " + w.ggml->cpu_variant() : std::string("epd's f32 kernels");
  if (!w.ggml) return out;
  out += "; " + std::to_string(packed) + " of " + std::to_string(total) + " matrices repacked";
  if (!names.empty()) {
    out += " (";
    for (auto it = names.begin(); it != names.end(); ++it)
      out += (it == names.begin() ? "" : ", ") + it->first + " x" + std::to_string(it->second);
    out += ")";
  }
  if (w.packed && packed) out += " in " + w.packed->where();
  out += "; decode batches " + std::to_string(batched) + " of " + std::to_string(total) +
         " matrices with batch kernels";
  return out;
}

protocol::Result<DecoderWeights> load_decoder_weights(const ModelConfig& cfg) {
  const std::string& path = cfg.checkpoint;
  auto shape = read_checkpoint_config(path);
  if (!shape) return shape.error();
  // The caller's config must describe this checkpoint (only page size and threads are its own).
  ModelConfig expect = *shape;
  expect.name = cfg.name;
  expect.page_size = cfg.page_size;
  expect.threads = cfg.threads;
  expect.mmproj = cfg.mmproj;
  expect.max_image_patches = cfg.max_image_patches;  // images only: with_mmproj() sets them
  expect.bidirectional_images = cfg.bidirectional_images;
  expect.max_seq = std::min(expect.max_seq, cfg.max_seq);
  if (!(expect == cfg)) return bad(path, "the model config does not match the checkpoint's shape");

  // llama.cpp's kernels: required by any tensor in another type than f32; f32 matrices run without them (on
  // epd's own kernels) when the library cannot be loaded, and decode through its vec_dot_f32 when it can.
  auto loaded = ggml::Library::get();
  const ggml::Library* lib = loaded ? *loaded : nullptr;
  if (is_gguf(path)) {
    auto g = GgufFile::open(path);
    if (!g) return g.error();
    auto file = std::make_shared<const GgufFile>(std::move(*g));
    for (const TensorRef& t : file->tensors())
      if (t.type != TensorType::f32 && !lib)
        return bad("GGUF " + path, "tensor " + t.name + " is " + std::string(tensor_type_name(t.type)) +
                                       ": " + loaded.error().detail);
    auto model = read_gguf_model(*file);
    if (!model) return model.error();
    auto w = load_gguf_weights(cfg, *model, file, lib);
    if (!w) return w.error();
    if (lib) {
      if (auto st = pack(*w, *file, *lib); !st) return bad("GGUF " + path, st.error().detail);
      check_batch_kernels(*w, *lib);
    }
    w->file = std::move(file);
    return w;
  }

  std::string st_path = path;
  auto st = SafetensorsCheckpoint::open(st_path);
  if (!st) return st.error();
  const SafetensorsCheckpoint& file = *st;
  std::ifstream in(hf_dir(path) / "config.json", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, false);
  const auto tie = j.is_object() ? j.find("tie_word_embeddings") : j.end();
  const bool tied = tie != j.end() && tie->is_boolean() && tie->get<bool>();
  const auto mt = j.is_object() ? j.find("model_type") : j.end();
  const families::DecoderFamily* family =
      families::family_by_hf_model_type(mt != j.end() && mt->is_string() ? mt->get<std::string>() : "");
  if (!family) return bad(path, "unsupported architecture (model_type)");
  const Lookup find = [&](const std::string& name) { return file.tensor(name); };
  auto w = load_with(cfg, MatrixSource{find, path, false, true, nullptr}, family->hf_tensor, tied);
  if (!w) return w.error();
  w->ggml = lib;
  return w;
}

}  // namespace detail

bool is_checkpoint_path(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || is_gguf(path) || ends_with(path, ".safetensors");
}

protocol::Result<ModelConfig> read_checkpoint_config(const std::string& path) {
  if (!is_gguf(path)) return read_hf_config(path);
  auto g = GgufFile::open(path);
  if (!g) return g.error();
  auto model = detail::read_gguf_model(*g);
  if (!model) return model.error();
  return model->cfg;
}

protocol::Result<ModelConfig> load_model_path(const std::string& path) {
  return is_checkpoint_path(path) ? read_checkpoint_config(path) : load_model_config(path);
}

}  // namespace epd::model
