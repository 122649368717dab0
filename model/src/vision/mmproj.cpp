// An mmproj's header and an image's layout, after libmtmd (tools/mtmd of the pinned llama.cpp): the keys
// clip.cpp reads, the fixed-size and Idefics3 preprocessors' sizes, and the markers mtmd_tokenize emits.
#include "epd/model/mmproj.hpp"

#include <algorithm>

#include "epd/model/gguf.hpp"

namespace epd::model {
namespace {

protocol::Error bad(const std::string& path, const std::string& what) {
  return protocol::make_error(protocol::ErrorCode::config_error, "mmproj " + path + ": " + what);
}

// Projectors libmtmd runs that need what epd's runner lacks, and what that is.
std::optional<std::string> lacking(const std::string& projector) {
  static const std::string_view mrope[] = {
      "qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "mimovl",    "glm4v",
      "paddleocr",      "youtuvl",          "hunyuanvl",      "exaone4_5", "muse-glimmer"};
  static const std::string_view non_causal[] = {"gemma3", "gemma4v", "gemma4uv", "deepseek4v"};
  for (auto p : mrope)
    if (projector == p) return "M-RoPE (2-D image positions, as Qwen2-VL's language model uses them)";
  for (auto p : non_causal)
    if (projector == p) return "non-causal attention over image rows (as Gemma 3's language model uses it)";
  return std::nullopt;
}

protocol::Result<uint32_t> positive(const GgufFile& g, const std::string& key, bool required) {
  auto v = g.get_uint(key);
  if (!v) return bad(g.name(), v.error().detail);
  if (!*v) {
    if (required) return bad(g.name(), "missing " + key);
    return 0u;
  }
  if (**v == 0 || **v > 65536) return bad(g.name(), key + " = " + std::to_string(**v) + " is out of range");
  return uint32_t(**v);
}

}  // namespace

protocol::Result<MmprojInfo> read_mmproj_info(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file) return bad(path, file.error().detail);
  const GgufFile& g = *file;
  MmprojInfo info;
  info.path = path;
  auto flag = [&](const char* key) {
    const GgufValue* v = g.find(key);
    return v && v->type == GgufType::boolean && v->i != 0;
  };
  if (flag("clip.has_audio_encoder") || flag("clip.has_gen_audio_encoder"))
    return bad(path, "it has an audio encoder; epd serves images only");
  if (!flag("clip.has_vision_encoder"))
    return bad(path, "it has no vision encoder (clip.has_vision_encoder)");
  std::string name;
  for (const char* key : {"clip.projector_type", "clip.vision.projector_type"}) {
    auto s = g.get_string(key);
    if (!s) return bad(path, s.error().detail);
    if (*s) {
      name = **s;
      break;
    }
  }
  if (name.empty()) return bad(path, "no clip.projector_type");
  info.projector_name = name;
  if (auto what = lacking(name))
    return bad(path, "projector '" + name + "' needs " + *what + ", which epd's runner lacks");
  if (name == "mlp")
    info.projector = Projector::mlp;
  else if (name == "idefics3")
    info.projector = Projector::idefics3;
  else
    return bad(path, "projector '" + name + "' is not one epd lays out (mlp: LLaVA-1.5; idefics3: SmolVLM)");

  auto image_size = positive(g, "clip.vision.image_size", true);
  if (!image_size) return image_size.error();
  auto patch_size = positive(g, "clip.vision.patch_size", true);
  if (!patch_size) return patch_size.error();
  info.image_size = *image_size;
  info.patch_size = *patch_size;
  if (info.image_size % info.patch_size != 0)
    return bad(path, "image_size " + std::to_string(info.image_size) + " is not a multiple of patch_size " +
                         std::to_string(info.patch_size));
  const uint32_t side = info.image_size / info.patch_size;
  const char* out_tensor = "mm.2.weight";
  if (info.projector == Projector::mlp) {
    if (g.find("clip.vision.image_grid_pinpoints"))
      return bad(path, "LLaVA-1.6 anyres tiling (clip.vision.image_grid_pinpoints) is not laid out by epd");
    info.rows_per_image = side * side;
  } else {
    auto scale = positive(g, "clip.vision.projector.scale_factor", false);
    if (!scale) return scale.error();
    info.scale_factor = std::max(*scale, 1u);
    auto edge = positive(g, "clip.vision.preproc_image_size", false);
    if (!edge) return edge.error();
    if (*edge == 0)
      return bad(path,
                 "idefics3 without clip.vision.preproc_image_size (older files) is not laid out by epd");
    info.longest_edge = *edge;
    if (g.find("clip.vision.image_min_pixels") || g.find("clip.vision.image_max_pixels"))
      return bad(path, "idefics3 with image_min_pixels / image_max_pixels is not laid out by epd");
    if (side % info.scale_factor != 0)
      return bad(path, "scale_factor " + std::to_string(info.scale_factor) + " does not divide " +
                           std::to_string(side) + " patches per side");
    const uint32_t merged = side / info.scale_factor;
    info.rows_per_image = merged * merged;
    out_tensor = "mm.model.fc.weight";
  }
  const TensorRef* out = g.tensor(out_tensor);
  if (!out || out->shape.size() != 2) return bad(path, std::string("missing the projector's ") + out_tensor);
  info.embedding_width = uint32_t(out->shape[0]);
  return info;
}

protocol::Status check_mmproj_pair(const MmprojInfo& info, const ModelConfig& lm) {
  if (info.embedding_width != lm.d_model)
    return bad(info.path, "its projector writes rows of " + std::to_string(info.embedding_width) +
                              " values, the language model " + lm.name + " embeds " +
                              std::to_string(lm.d_model) + ": not a matching pair");
  return {};
}

protocol::Result<std::vector<LayoutItem>> image_layout(const MmprojInfo& info, ImageDims dims) {
  std::vector<LayoutItem> out;
  if (dims.width == 0 || dims.height == 0)
    return protocol::make_error(protocol::ErrorCode::invalid_request, "image has no pixels");
  if (info.projector == Projector::mlp) {
    out.push_back({"", info.rows_per_image});
    return out;
  }
  // Idefics3: the long side scaled to longest_edge (the short side kept in proportion, made even), cut into
  // image_size tiles, row by row, then the whole image as the overview (mtmd-image.cpp, mtmd.cpp).
  const int edge = int(info.longest_edge), tile = int(info.image_size);
  const double aspect = double(dims.width) / double(dims.height);
  int w = edge, h = edge;
  if (dims.width >= dims.height) {
    h = int(edge / aspect);
    h += h % 2;
  } else {
    w = int(edge * aspect);
    w += w % 2;
  }
  if (w <= 0 || h <= 0)
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "image of " + std::to_string(dims.width) + "x" + std::to_string(dims.height) +
                                    " is too long and thin for " + info.projector_name +
                                    "'s tiles (a side scales to 0)");
  const int grid_x = (w + tile - 1) / tile, grid_y = (h + tile - 1) / tile;
  for (int y = 0; y < grid_y; ++y) {
    for (int x = 0; x < grid_x; ++x) {
      out.push_back({"<fake_token_around_image>", 0});
      out.push_back({"<row_" + std::to_string(y + 1) + "_col_" + std::to_string(x + 1) + ">", 0});
      out.push_back({"", info.rows_per_image});
    }
    if (y != grid_y - 1) out.push_back({"\n", 0});
  }
  for (const char* p : {"\n\n", "<fake_token_around_image>", "<global-img>"}) out.push_back({p, 0});
  out.push_back({"", info.rows_per_image});
  out.push_back({"<fake_token_around_image>", 0});
  return out;
}

uint32_t layout_rows(const std::vector<LayoutItem>& layout) {
  uint32_t n = 0;
  for (const auto& item : layout) n += item.rows;
  return n;
}

ModelConfig with_mmproj(ModelConfig cfg, std::string path) {
  cfg.mmproj = std::move(path);
  if (!cfg.mmproj.empty()) cfg.max_image_patches = std::min(cfg.max_seq, 4096u);
  return cfg;
}

std::optional<TokenId> image_token(const ModelConfig& cfg) {
  if (cfg.checkpoint.empty()) return kImage;
  if (!cfg.mmproj.empty()) return cfg.vocab;
  return std::nullopt;
}

}  // namespace epd::model
