#include "ggml_cpu.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

// The declarations of the prebuilt libraries' version (the bundle the build took them from).
#include "ggml-cpu.h"
#include "ggml.h"

#ifndef EPD_GGML_DEFAULT_DIR
#define EPD_GGML_DEFAULT_DIR ""
#endif

namespace epd::model::ggml {
namespace {

namespace fs = std::filesystem;
using protocol::ErrorCode;
using protocol::make_error;

constexpr std::string_view kCpuPrefix = "libggml-cpu-";
constexpr std::string_view kSoSuffix = ".so";

template <class F>
F sym(void* lib, const char* name) {
  return reinterpret_cast<F>(::dlsym(lib, name));
}

std::string dl_error() {
  const char* e = ::dlerror();
  return e ? e : "unknown dlopen error";
}

struct Candidate {
  std::string variant;
  fs::path path;
};

// libggml-cpu-<variant>.so files of the directory, sorted by name (a stable choice among equal scores).
std::vector<Candidate> cpu_variants(const fs::path& dir) {
  std::vector<Candidate> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > kCpuPrefix.size() + kSoSuffix.size() && name.starts_with(kCpuPrefix) &&
        name.ends_with(kSoSuffix))
      out.push_back(
          {name.substr(kCpuPrefix.size(), name.size() - kCpuPrefix.size() - kSoSuffix.size()), e.path()});
  }
  std::sort(out.begin(), out.end(),
            [](const Candidate& a, const Candidate& b) { return a.variant < b.variant; });
  return out;
}

}  // namespace

protocol::Result<const Library*> Library::get() {
  static const protocol::Result<const Library*> loaded = load();
  return loaded;
}

protocol::Result<const Library*> Library::load() {
  const char* env_dir = std::getenv("EPD_GGML_DIR");
  const fs::path dir = env_dir && *env_dir ? env_dir : EPD_GGML_DEFAULT_DIR;
  auto fail = [&](const std::string& what) -> protocol::Result<const Library*> {
    return make_error(ErrorCode::config_error,
                      "llama.cpp's ggml libraries (" +
                          (dir.empty() ? std::string("no directory") : dir.string()) +
                          ", set EPD_GGML_DIR; scripts/setup-deps installs them): " + what);
  };
  if (dir.empty()) return fail("the build found none");

  // Both stay loaded for the life of the process: their kernels are called from any runner.
  void* base = ::dlopen((dir / "libggml-base.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!base) return fail(dl_error());
  std::unique_ptr<Library> lib(new Library());
  lib->dir_ = dir.string();
  lib->row_size_ = sym<size_t (*)(int, int64_t)>(base, "ggml_row_size");
  lib->quantize_chunk_ = sym<size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t, const float*)>(
      base, "ggml_quantize_chunk");
  auto base_traits = sym<decltype(&ggml_get_type_traits)>(base, "ggml_get_type_traits");
  if (!lib->row_size_ || !lib->quantize_chunk_ || !base_traits) return fail("libggml-base.so lacks its API");

  // The CPU back end: the variant $EPD_GGML_CPU names, else the one whose own score is highest (0 = this
  // CPU lacks an instruction it needs).
  const char* want = std::getenv("EPD_GGML_CPU");
  void* cpu = nullptr;
  int best = 0;
  for (const Candidate& c : cpu_variants(dir)) {
    if (want && *want && c.variant != want) continue;
    void* h = ::dlopen(c.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    auto score_fn = sym<int (*)()>(h, "ggml_backend_score");
    const int score = score_fn ? score_fn() : 0;
    if (score > best) {
      if (cpu) ::dlclose(cpu);
      cpu = h;
      best = score;
      lib->variant_ = c.variant;
    } else {
      ::dlclose(h);
    }
  }
  if (!cpu)
    return fail(want && *want ? "no libggml-cpu-" + std::string(want) + ".so that runs on this CPU"
                              : "no libggml-cpu-*.so that runs on this CPU");
  auto cpu_init = sym<decltype(&ggml_cpu_init)>(cpu, "ggml_cpu_init");
  auto cpu_traits = sym<decltype(&ggml_get_type_traits_cpu)>(cpu, "ggml_get_type_traits_cpu");
  if (!cpu_init || !cpu_traits) return fail("libggml-cpu-" + lib->variant_ + ".so lacks its API");
  cpu_init();  // ggml's f16 tables and feature probes, before any kernel runs

  for (uint32_t t = 0; t < GGML_TYPE_COUNT && t < kTypes; ++t) {
    const ggml_type_traits* b = base_traits(static_cast<ggml_type>(t));
    const ggml_type_traits_cpu* c = cpu_traits(static_cast<ggml_type>(t));
    TypeFns& f = lib->fns_[t];
    if (b) f.to_float = b->to_float;
    if (c) {
      f.from_float = c->from_float;
      f.vec_dot = c->vec_dot;
      f.vec_dot_type = static_cast<uint32_t>(c->vec_dot_type);
    }
  }
  // epd's own size table must be this library's, and every type epd reads must have its kernels.
  for (const TensorTypeInfo& info : tensor_types()) {
    const auto t = static_cast<uint32_t>(info.type);
    const ggml_type_traits* b = base_traits(static_cast<ggml_type>(t));
    if (!b || b->blck_size != info.block_elements || b->type_size != info.block_bytes)
      return fail("type " + std::string(info.name) + " has another block layout in this library");
    const TypeFns& f = lib->fns_[t];
    if (!f.vec_dot || f.vec_dot_type >= kTypes || !lib->fns_[f.vec_dot_type].from_float)
      return fail("no CPU kernels for type " + std::string(info.name));
  }
  return static_cast<const Library*>(lib.release());  // one per process, never freed
}

uint32_t Library::input_type(TensorType weights) const {
  return fns_[static_cast<uint32_t>(weights)].vec_dot_type;
}

size_t Library::row_size(uint32_t ggml_type, int64_t n) const {
  return row_size_(static_cast<int>(ggml_type), n);
}

void Library::quantize_row(uint32_t ggml_type, const float* x, void* y, int64_t n) const {
  fns_[ggml_type].from_float(x, y, n);
}

void Library::vec_dot(TensorType weights, int64_t n, float* s, const void* w_row, const void* x_row) const {
  fns_[static_cast<uint32_t>(weights)].vec_dot(static_cast<int>(n), s, 0, w_row, 0, x_row, 0, 1);
}

void Library::to_float(TensorType t, const void* x, float* y, int64_t n) const {
  fns_[static_cast<uint32_t>(t)].to_float(x, y, n);
}

size_t Library::quantize(TensorType t, const float* src, void* dst, int64_t rows, int64_t n_per_row) const {
  return quantize_chunk_(static_cast<int>(t), src, dst, 0, rows, n_per_row, nullptr);
}

}  // namespace epd::model::ggml
