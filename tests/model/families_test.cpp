// What epd refuses in a checkpoint file: every tensor and every key that changes what a model computes is
// either one epd runs or an error naming it. The lists come from llama.cpp's own source (the bundle in the
// build tree): the tensors each family's graph builder creates (src/models/<arch>.cpp) and the keys its
// loader reads (src/llama-model.cpp for every architecture, the family's file for its own), named through
// src/llama-arch.cpp. A tensor or key llama.cpp adds in a newer version cannot slip by: unless epd's family
// lists it, a file holding it must be refused by name.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "epd/model/llama.hpp"
#include "helpers.hpp"
#include "llama_checkpoint.hpp"

namespace {

namespace fs = std::filesystem;
using namespace epd::model;
using epd::model::test::TempDir;
using epd::model::testing::CheckpointSpec;
using epd::model::testing::write_llama_checkpoint;

std::string read_source(const std::string& relative) {
  const fs::path p = fs::path(EPD_LLAMA_CPP_SRC) / relative;
  std::ifstream in(p);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), {}};
}

// LLM_TENSOR_X -> "blk.%d.x" and LLM_KV_X -> "%s.x", from llama-arch.cpp's tables.
std::map<std::string, std::string> name_table(const std::string& source, const std::string& prefix) {
  std::map<std::string, std::string> out;
  const std::regex entry("\\{\\s*(" + prefix + "[A-Z0-9_]+)\\s*,\\s*\"([^\"]+)\"\\s*\\}");
  for (std::sregex_iterator it(source.begin(), source.end(), entry), end; it != end; ++it)
    out.emplace((*it)[1], (*it)[2]);
  return out;
}

// The GGUF tensor names llama.cpp's loader creates for an architecture: tn(LLM_TENSOR_X, "suffix"[, i]),
// and create_tensor_qkv's fused and separate Q/K/V weights and biases.
std::set<std::string> llama_cpp_tensors(const std::string& arch) {
  const auto names = name_table(read_source("src/llama-arch.cpp"), "LLM_TENSOR_");
  const std::string src = read_source("src/models/" + arch + ".cpp");
  std::set<std::string> out;
  const std::regex use("tn\\((LLM_TENSOR_[A-Z0-9_]+),\\s*\"([a-z_]+)\"");
  for (std::sregex_iterator it(src.begin(), src.end(), use), end; it != end; ++it) {
    const auto n = names.find((*it)[1]);
    REQUIRE(n != names.end());
    out.insert(n->second + "." + std::string((*it)[2]));
  }
  if (src.find("create_tensor_qkv(") != std::string::npos)
    for (const char* t : {"attn_qkv", "attn_q", "attn_k", "attn_v"})
      for (const char* suffix : {".weight", ".bias"}) out.insert(std::string("blk.%d.") + t + suffix);
  return out;
}

// The "<arch>.*" keys llama.cpp reads for an architecture (short names): every architecture's
// (llama_model::load_hparams) and the family's own (load_arch_hparams).
std::set<std::string> llama_cpp_keys(const std::string& arch) {
  const auto names = name_table(read_source("src/llama-arch.cpp"), "LLM_KV_");
  std::string src = read_source("src/models/" + arch + ".cpp");
  const std::string model = read_source("src/llama-model.cpp");
  const size_t begin = model.find("::load_hparams(llama_model_loader");
  REQUIRE(begin != std::string::npos);
  src += model.substr(begin, model.find("load_arch_hparams(ml);", begin) - begin);
  std::set<std::string> out;
  const std::regex use("get_(?:key|arr|key_or_arr|arr_n)\\((LLM_KV_[A-Z0-9_]+)");
  for (std::sregex_iterator it(src.begin(), src.end(), use), end; it != end; ++it) {
    const auto n = names.find((*it)[1]);
    REQUIRE(n != names.end());
    if (n->second.starts_with("%s.")) out.insert(n->second.substr(3));
  }
  return out;
}

// A small file of the family (what the oracle tests run), plus one tensor or key.
CheckpointSpec family_spec(const std::string& arch) {
  CheckpointSpec s;
  s.arch = arch;
  s.write_hf = false;
  s.mixed_dtypes = false;
  if (arch == "gemma3") s.sliding_window = 16;
  if (arch == "qwen2vl") s.rope_sections = {2, 3, 3, 0};  // required, as llama.cpp requires it
  return s;
}

std::string load_error(const CheckpointSpec& spec, const fs::path& dir) {
  fs::remove_all(dir);
  auto paths = write_llama_checkpoint(spec, dir);
  REQUIRE(paths.ok());
  auto cfg = read_checkpoint_config(paths->gguf);
  if (!cfg) return cfg.error().detail;
  auto r = make_llama_runner(*cfg);
  return r ? std::string() : r.error().detail;
}

}  // namespace

TEST_CASE("Every tensor and key llama.cpp knows for a family is run by epd or refused by name") {
  TempDir dir;
  for (const CheckpointFamily& family : checkpoint_families()) {
    INFO("family " << family.name);
    const std::set<std::string> ours(family.gguf_tensors.begin(), family.gguf_tensors.end());
    const std::set<std::string> our_keys(family.gguf_keys.begin(), family.gguf_keys.end());
    // The plain file loads: what the test adds below is what makes it fail.
    CHECK(load_error(family_spec(family.gguf_arch), dir.path / "plain") == "");
    const auto tensors = llama_cpp_tensors(family.gguf_arch);
    CHECK(tensors.size() >= 10);  // the parse found the family's loader
    size_t refused = 0;
    for (const std::string& pattern : tensors) {
      if (ours.contains(pattern)) continue;
      std::string name = std::regex_replace(pattern, std::regex("%d"), "0");
      CheckpointSpec spec = family_spec(family.gguf_arch);
      spec.extra_tensors.push_back({name, 4});
      INFO("tensor " << name);
      CHECK_THAT(load_error(spec, dir.path / "tensor"), Catch::Contains("tensor " + name));
      ++refused;
    }
    const auto keys = llama_cpp_keys(family.gguf_arch);
    CHECK(keys.contains("embedding_length"));
    for (const std::string& key : keys) {
      if (our_keys.contains(key)) continue;
      CheckpointSpec spec = family_spec(family.gguf_arch);
      const std::string full = family.gguf_arch + "." + key;
      spec.extra_u32_keys.push_back({full, 3});
      INFO("key " << full);
      CHECK_THAT(load_error(spec, dir.path / "key"), Catch::Contains(full));
      ++refused;
    }
    std::printf("%s: llama.cpp lists %zu tensors and %zu keys; epd runs %zu and %zu, refuses %zu\n",
                family.name.c_str(), tensors.size(), keys.size(), ours.size(), our_keys.size(), refused);
  }
}

TEST_CASE("Checkpoint files with what epd does not run give errors naming it") {
  TempDir dir;
  auto expect = [&](CheckpointSpec spec, const std::string& needle) {
    INFO("expecting " << needle);
    CHECK_THAT(load_error(spec, dir.path / "case"), Catch::Contains(needle));
  };
  {
    auto s = family_spec("llama");  // a tensor of another family
    s.extra_tensors.push_back({"blk.0.attn_q_norm.weight", 16});
    expect(s, "tensor blk.0.attn_q_norm.weight is not used by epd's llama decoder");
  }
  {
    auto s = family_spec("qwen2");  // Llama 3's factors in a family whose loader never reads them
    s.extra_tensors.push_back({"rope_freqs.weight", 8});
    expect(s, "tensor rope_freqs.weight is not used by epd's qwen2 decoder");
  }
  {
    auto s = family_spec("llama");
    s.rope_scaling = "su";
    expect(s, "llama.rope.scaling.type 'su' is not supported");
  }
  {
    auto s = family_spec("qwen3");
    s.extra_u32_keys.push_back({"qwen3.expert_count", 128});
    expect(s, "qwen3.expert_count: mixture of experts is not supported");
  }
  {
    auto s = family_spec("llama");  // a key only another family reads
    s.extra_u32_keys.push_back({"llama.attention.sliding_window", 4});
    expect(s, "metadata key llama.attention.sliding_window is not used by epd's llama decoder");
  }
  {
    auto s = family_spec("mistral3");
    s.extra_f32_keys.push_back({"mistral3.attention.temperature_scale", 0.1f});
    expect(s, "attention temperature tuning");
  }
  {
    auto s = family_spec("llama");  // a namespace that is not metadata
    s.extra_u32_keys.push_back({"adapter.lora.alpha", 16});
    expect(s, "metadata key adapter.lora.alpha is not used");
  }
  {
    auto s = family_spec("llama");  // partial rotation: llama.cpp itself refuses it for Llama
    s.rope_dims = 8;
    expect(s, "partial RoPE");
  }
  {
    auto s = family_spec("gemma3");
    s.rope_freqs = true;  // no frequency factors in Gemma 3
    expect(s, "tensor rope_freqs.weight is not used by epd's gemma3 decoder");
  }
  {
    auto s = family_spec("qwen2vl");  // M-RoPE without its sections, or with sections it cannot have
    s.rope_sections.clear();
    expect(s, "qwen2vl.rope.dimension_sections is missing");
    s.rope_sections = {2, 3, 3};
    expect(s, "qwen2vl.rope.dimension_sections must be an array of 4");
    s.rope_sections = {4, 4, 4, 0};  // 12 pairs of a head of 8
    expect(s, "sums to 12 pairs, not 1..8");
  }
}
