#include "kernels/ggml/ggml_cpu.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <tuple>
#include <vector>

// The declarations of the prebuilt libraries' version (the bundle the build took them from).
#include "ggml-backend.h"
#include "ggml-cpu-impl.h"  // ggml_compute_params, which llamafile_sgemm takes
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

// The packing a CPU_REPACK tensor's traits object stands for, read from its class's vtable symbol:
// ggml::cpu::repack::tensor_traits<block_q4_K, 8, 8, GGML_TYPE_Q8_K> is
// _ZTVN4ggml3cpu6repack13tensor_traitsI10block_q4_KLl8ELl8EL9ggml_type15EEE. Those template arguments name
// the kernels: ggml_gemm_q4_K_8x8_q8_K, ggml_quantize_mat_q8_K_4x8.
std::optional<Packing> packing_of(const void* traits, void* cpu) {
  Dl_info info{};
  if (!traits || !::dladdr(*static_cast<void* const*>(traits), &info) || !info.dli_sname) return std::nullopt;
  const std::string_view vtable = info.dli_sname;
  constexpr std::string_view kPrefix = "_ZTVN4ggml3cpu6repack13tensor_traitsI";
  if (!vtable.starts_with(kPrefix)) return std::nullopt;
  std::string_view rest = vtable.substr(kPrefix.size());
  auto number = [&rest](std::string_view lead) -> std::optional<uint64_t> {
    if (!rest.starts_with(lead)) return std::nullopt;
    rest.remove_prefix(lead.size());
    uint64_t v = 0;
    size_t i = 0;
    for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9'; ++i) v = v * 10 + uint64_t(rest[i] - '0');
    if (i == 0) return std::nullopt;
    rest.remove_prefix(i);
    return v;
  };
  const auto name_len = number("");
  if (!name_len || *name_len > rest.size()) return std::nullopt;
  std::string_view block = rest.substr(0, *name_len);
  rest.remove_prefix(*name_len);
  if (!block.starts_with("block_")) return std::nullopt;
  block.remove_prefix(6);
  const auto inter = number("Ll");
  if (!inter || !rest.starts_with("E")) return std::nullopt;
  rest.remove_prefix(1);
  const auto cols = number("Ll");
  if (!cols || !rest.starts_with("E")) return std::nullopt;
  rest.remove_prefix(1);
  const auto param = number("L9ggml_type");
  if (!param || (*param != GGML_TYPE_Q8_0 && *param != GGML_TYPE_Q8_K)) return std::nullopt;
  const std::string input = *param == GGML_TYPE_Q8_0 ? "q8_0" : "q8_K";

  Packing p;
  p.name = std::string(block) + "_" + std::to_string(*cols) + "x" + std::to_string(*inter) + "_" + input;
  p.cols = static_cast<uint32_t>(*cols);
  p.input_type = static_cast<uint32_t>(*param);
  p.gemm = sym<Packing::Gemm>(cpu, ("ggml_gemm_" + p.name).c_str());
  p.gemv = sym<Packing::Gemm>(cpu, ("ggml_gemv_" + p.name).c_str());
  p.quantize4 =
      sym<Packing::QuantizeMat>(cpu, ("ggml_quantize_mat_" + input + "_4x" + std::to_string(*inter)).c_str());
  if (!p.gemm || !p.gemv || !p.quantize4 || p.cols == 0) return std::nullopt;
  return p;
}

}  // namespace

// libggml-base's tensor and buffer API and the CPU back end's CPU_REPACK buffer type: what llama.cpp's loader
// uses to repack a weight, used here the same way.
struct Library::Backend {
  decltype(&ggml_init) init = nullptr;
  decltype(&ggml_free) free = nullptr;
  decltype(&ggml_tensor_overhead) tensor_overhead = nullptr;
  decltype(&ggml_new_tensor_2d) new_tensor_2d = nullptr;
  decltype(&ggml_nbytes) nbytes = nullptr;
  decltype(&ggml_backend_buft_alloc_buffer) alloc_buffer = nullptr;
  decltype(&ggml_backend_buffer_free) free_buffer = nullptr;
  decltype(&ggml_backend_buffer_get_base) buffer_base = nullptr;
  decltype(&ggml_backend_tensor_alloc) tensor_alloc = nullptr;
  decltype(&ggml_backend_tensor_set) tensor_set = nullptr;
  ggml_backend_buffer_type_t repack = nullptr;

  // The CPU device's extra buffer type named CPU_REPACK, or null.
  static const Backend* load(void* base, void* cpu) {
    auto b = std::make_unique<Backend>();
    b->init = sym<decltype(b->init)>(base, "ggml_init");
    b->free = sym<decltype(b->free)>(base, "ggml_free");
    b->tensor_overhead = sym<decltype(b->tensor_overhead)>(base, "ggml_tensor_overhead");
    b->new_tensor_2d = sym<decltype(b->new_tensor_2d)>(base, "ggml_new_tensor_2d");
    b->nbytes = sym<decltype(b->nbytes)>(base, "ggml_nbytes");
    b->alloc_buffer = sym<decltype(b->alloc_buffer)>(base, "ggml_backend_buft_alloc_buffer");
    b->free_buffer = sym<decltype(b->free_buffer)>(base, "ggml_backend_buffer_free");
    b->buffer_base = sym<decltype(b->buffer_base)>(base, "ggml_backend_buffer_get_base");
    b->tensor_alloc = sym<decltype(b->tensor_alloc)>(base, "ggml_backend_tensor_alloc");
    b->tensor_set = sym<decltype(b->tensor_set)>(base, "ggml_backend_tensor_set");
    auto reg_proc =
        sym<decltype(&ggml_backend_reg_get_proc_address)>(base, "ggml_backend_reg_get_proc_address");
    auto reg_dev = sym<decltype(&ggml_backend_reg_dev_get)>(base, "ggml_backend_reg_dev_get");
    auto buft_name = sym<decltype(&ggml_backend_buft_name)>(base, "ggml_backend_buft_name");
    auto cpu_reg = sym<decltype(&ggml_backend_cpu_reg)>(cpu, "ggml_backend_cpu_reg");
    if (!b->init || !b->free || !b->tensor_overhead || !b->new_tensor_2d || !b->nbytes || !b->alloc_buffer ||
        !b->free_buffer || !b->buffer_base || !b->tensor_alloc || !b->tensor_set || !reg_proc || !reg_dev ||
        !buft_name || !cpu_reg)
      return nullptr;
    ggml_backend_reg_t reg = cpu_reg();
    auto extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
        reg ? reg_proc(reg, "ggml_backend_dev_get_extra_bufts") : nullptr);
    ggml_backend_dev_t dev = reg ? reg_dev(reg, 0) : nullptr;
    if (!extra || !dev) return nullptr;
    for (ggml_backend_buffer_type_t* t = extra(dev); t && *t; ++t)
      if (std::string_view(buft_name(*t)) == "CPU_REPACK") b->repack = *t;
    if (!b->repack) return nullptr;
    return b.release();  // one per process, as the library
  }
};

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
    // A variant scores itself (0: this CPU lacks an instruction it needs). One built without that entry
    // (a plain GGML_NATIVE build) runs only when named.
    auto score_fn = sym<int (*)()>(h, "ggml_backend_score");
    const int score = score_fn ? score_fn() : (want && *want ? 1 : 0);
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
  // ggml logs every repacked tensor (and more) to stderr; epd says what it uses itself. Errors still show.
  if (auto log_set = sym<decltype(&ggml_log_set)>(base, "ggml_log_set"))
    log_set(
        [](ggml_log_level level, const char* text, void*) {
          if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
        },
        nullptr);
  cpu_init();  // ggml's f16 tables and feature probes, before any kernel runs
  lib->cpu_ = cpu;
  lib->sgemm_ = sym<decltype(lib->sgemm_)>(cpu, "llamafile_sgemm");  // optional: row kernels otherwise
  lib->fp16_to_fp32_ = sym<decltype(lib->fp16_to_fp32_)>(cpu, "ggml_cpu_fp16_to_fp32");  // optional
  lib->backend_ = Backend::load(base, cpu);  // optional: no repacking otherwise

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
  if (t == TensorType::f16 && fp16_to_fp32_) return fp16_to_fp32_(static_cast<const uint16_t*>(x), y, n);
  fns_[static_cast<uint32_t>(t)].to_float(x, y, n);
}

size_t Library::quantize(TensorType t, const float* src, void* dst, int64_t rows, int64_t n_per_row) const {
  return quantize_chunk_(static_cast<int>(t), src, dst, 0, rows, n_per_row, nullptr);
}

bool Library::sgemm(TensorType weights, int64_t m, int64_t n, int64_t k, const void* a, size_t a_row_bytes,
                    const void* b, size_t b_row_bytes, float* c, int64_t ldc) const {
  // The block types whose tinyBLAS splits its tiles by (ith, nth) alone; the float ones synchronise through
  // ggml's thread pool, which epd's threads are not.
  switch (weights) {
    case TensorType::q8_0:
    case TensorType::q4_0:
    case TensorType::q5_0:
    case TensorType::iq4_nl:
      break;
    default:
      return false;
  }
  if (!sgemm_ || n < 2) return false;
  const uint32_t wt = static_cast<uint32_t>(weights), bt = input_type(weights);
  constexpr int64_t kBlock = 32;  // values per block of every type above and of Q8_0
  const size_t a_block = row_size(wt, kBlock), b_block = row_size(bt, kBlock);
  ggml_compute_params params{};
  params.ith = 0;
  params.nth = 1;  // one caller per column block: epd's threads split the columns
  return sgemm_(&params, m, n, k / kBlock, a, static_cast<int64_t>(a_row_bytes / a_block), b,
                static_cast<int64_t>(b_row_bytes / b_block), c, ldc, static_cast<int>(wt),
                static_cast<int>(bt), GGML_TYPE_F32);
}

template <class F>
auto Library::with_repack_tensor(TensorType t, int64_t rows, int64_t cols, F&& use) const {
  using R = decltype(use(static_cast<ggml_tensor*>(nullptr)));
  if (!backend_) return use(nullptr);
  const Backend& b = *backend_;
  ggml_init_params ip{};
  ip.mem_size = b.tensor_overhead() * 2;
  ip.no_alloc = true;
  ggml_context* ctx = b.init(ip);
  if (!ctx) return use(nullptr);
  ggml_tensor* tensor = b.new_tensor_2d(ctx, static_cast<ggml_type>(t), cols, rows);
  ggml_backend_buffer_t buf = tensor ? b.alloc_buffer(b.repack, b.nbytes(tensor)) : nullptr;
  const bool placed =
      buf && b.tensor_alloc(buf, tensor, b.buffer_base(buf)) == GGML_STATUS_SUCCESS && tensor->extra;
  R r = use(placed ? tensor : nullptr);
  if (buf) b.free_buffer(buf);
  b.free(ctx);
  return r;
}

std::optional<Packing> Library::packing(TensorType t, int64_t rows, int64_t cols) const {
  return with_repack_tensor(t, rows, cols, [&](ggml_tensor* tensor) -> std::optional<Packing> {
    if (!tensor) return std::nullopt;
    return packing_of(tensor->extra, cpu_);
  });
}

protocol::Status Library::repack(TensorType t, int64_t rows, int64_t cols, const void* src, void* dst) const {
  return with_repack_tensor(t, rows, cols, [&](ggml_tensor* tensor) -> protocol::Status {
    if (!tensor || !packing_of(tensor->extra, cpu_))
      return make_error(ErrorCode::config_error, "ggml does not repack a " + std::to_string(rows) + " x " +
                                                     std::to_string(cols) + " " +
                                                     std::string(tensor_type_name(t)) + " matrix");
    const size_t bytes = backend_->nbytes(tensor);
    backend_->tensor_set(tensor, src, 0, bytes);  // ggml's repack, into the buffer
    std::memcpy(dst, tensor->data, bytes);
    return {};
  });
}

}  // namespace epd::model::ggml

namespace epd::model::ggml {
namespace {

// Test data for batch_agrees: kRows weight rows (more than one GEMM/GEMV column group and a part of a tile)
// and kBatch input rows (one group of four and three left over), normally distributed.
constexpr int64_t kRows = 24, kBatch = 7;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <class Check>
bool remembered(const std::string& key, Check check) {
  static std::mutex m;
  static std::map<std::string, bool> known;
  std::lock_guard lk(m);
  if (auto it = known.find(key); it != known.end()) return it->second;
  return known[key] = check();
}

}  // namespace

bool Library::batch_agrees(TensorType t, int64_t n) const {
  if (row_bytes(t, static_cast<uint64_t>(n)) == 0) return false;
  return remembered(std::string(tensor_type_name(t)) + "/" + std::to_string(n), [&] {
    const std::vector<float> w = random_values(static_cast<size_t>(kRows * n), 1),
                             x = random_values(static_cast<size_t>(kBatch * n), 2);
    const size_t wb = row_bytes(t, static_cast<uint64_t>(n));
    std::vector<std::byte> wq(kRows * wb);
    quantize(t, w.data(), wq.data(), kRows, n);
    const uint32_t it = input_type(t);
    const size_t xb = row_size(it, n);
    std::vector<std::byte> xq(kBatch * xb);
    for (int64_t r = 0; r < kBatch; ++r) quantize_row(it, &x[r * n], xq.data() + r * xb, n);
    std::vector<float> one(kBatch * kRows), many(kBatch * kRows);
    for (int64_t r = 0; r < kBatch; ++r)
      for (int64_t o = 0; o < kRows; ++o)
        vec_dot(t, n, &one[r * kRows + o], wq.data() + o * wb, xq.data() + r * xb);
    return sgemm(t, kRows, kBatch, n, wq.data(), wb, xq.data(), xb, many.data(), kRows) &&
           std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0;
  });
}

bool Library::batch_agrees(const Packing& p, TensorType t, int64_t n) const {
  if (row_bytes(t, static_cast<uint64_t>(n)) == 0 || kRows % p.cols != 0) return false;
  return remembered(p.name + "/" + std::to_string(n), [&] {
    const std::vector<float> w = random_values(static_cast<size_t>(kRows * n), 3),
                             x = random_values(static_cast<size_t>(kBatch * n), 4);
    const size_t wb = row_bytes(t, static_cast<uint64_t>(n));
    std::vector<std::byte> wq(kRows * wb), packed(kRows * wb);
    quantize(t, w.data(), wq.data(), kRows, n);
    if (!repack(t, kRows, n, wq.data(), packed.data())) return false;
    const size_t xb = row_size(p.input_type, n);
    std::vector<std::byte> rows(kBatch * xb), groups(4 * xb);
    for (int64_t r = 0; r < kBatch; ++r) quantize_row(p.input_type, &x[r * n], rows.data() + r * xb, n);
    p.quantize4(x.data(), groups.data(), n);
    std::vector<float> one(4 * kRows), many(4 * kRows);
    for (int64_t r = 0; r < 4; ++r)
      p.gemv(static_cast<int>(n), &one[r * kRows], kRows, packed.data(), rows.data() + r * xb, 1, kRows);
    p.gemm(static_cast<int>(n), many.data(), kRows, packed.data(), groups.data(), 4, kRows);
    return std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0;
  });
}

}  // namespace epd::model::ggml
