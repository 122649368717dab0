#include "model_bench.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "epd/model/llama.hpp"
#include "epd/model/runner.hpp"
#include "llama_baseline.hpp"
#include "llama_checkpoint.hpp"
#include "role_memory.hpp"

namespace m = epd::model;
namespace fs = std::filesystem;
using epd::bench::ModelFigures;
using epd::bench::ModelWorkload;

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct Pool {
  Pool(const m::ModelConfig& cfg, uint32_t pages, m::DType dtype) : words(0) {
    pool.layout = m::kv_layout_for(cfg, pages);
    pool.layout.dtype = dtype;
    words.assign((pool.layout.total_bytes() + 7) / 8, 0);
    pool.base = reinterpret_cast<std::byte*>(words.data());
  }
  std::vector<uint64_t> words;
  m::KvPool pool;
};

// A prompt of exactly n tokens. Reference model: BOS + printable bytes that differ per sequence.
// Checkpoint: ids (i * 7 + salt * 13) % vocab.
std::vector<m::TokenId> make_prompt(const m::ModelConfig& c, uint32_t n, uint32_t salt) {
  std::vector<m::TokenId> p;
  if (!c.checkpoint.empty()) {
    for (uint32_t i = 0; i < n; ++i) p.push_back((i * 7 + salt * 13) % c.vocab);
    return p;
  }
  p.push_back(m::kBos);
  for (uint32_t i = 1; i < n; ++i) p.push_back(32 + (i * 7 + salt * 13) % 95);
  return p;
}

// Multiply-accumulates of the weight matmuls for one LM token (attention over the cache not counted).
double matmul_flops_per_token(const m::ModelConfig& c) {
  const double d = c.d_model, q = double(c.heads) * c.head_dim, kv = double(c.kv_heads) * c.head_dim;
  const double per_layer = d * q * 2 + d * kv * 2 + 3 * d * c.ffn;
  return 2 * (per_layer * c.layers + d * c.vocab);
}

// Best of `repeat` runs of fn() (seconds).
template <class F>
double best_of(int repeat, F&& fn) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) best = std::min(best, fn());
  return best;
}

struct EpdRun {
  ModelFigures figures;
  double encode_ms = 0;
  std::string kernels;  // a checkpoint runner's kernels()
};

// Prefill of one prompt_len-token chunk; decode of `steps` steps at batch 1 and 8, each sequence first
// prefilled to `depth` tokens; for a preset also the encode of its largest image.
std::optional<EpdRun> measure_epd(m::ModelConfig cfg, const ModelWorkload& w, m::DType kv_dtype) {
  cfg.threads = w.threads;
  auto runner_r = m::make_runner(cfg);
  if (!runner_r) {
    std::fprintf(stderr, "epd-bench model: %s\n", runner_r.error().to_string().c_str());
    return std::nullopt;
  }
  m::ModelRunner& r = **runner_r;
  EpdRun out;
  if (auto* llama = dynamic_cast<m::LlamaRunner*>(&r)) out.kernels = llama->kernels();
  const uint32_t ps = cfg.page_size;
  const uint32_t per_seq = (std::max(w.prompt_len, w.depth + w.steps) + ps) / ps;

  {
    Pool p(cfg, per_seq, kv_dtype);
    std::vector<m::PageId> pages(per_seq);
    std::iota(pages.begin(), pages.end(), 0);
    const auto prompt = make_prompt(cfg, w.prompt_len, 0);
    const double s = best_of(w.repeat, [&] {
      auto t0 = clock_type::now();
      auto tok = r.prefill_chunk(p.pool, pages, 0, {prompt, {}});
      if (!tok) std::fprintf(stderr, "prefill: %s\n", tok.error().to_string().c_str());
      return seconds_since(t0);
    });
    out.figures.prefill_tps = w.prompt_len / s;
  }

  for (uint32_t batch : {1u, 8u}) {
    Pool p(cfg, per_seq * batch, kv_dtype);
    std::vector<std::vector<m::PageId>> pages(batch, std::vector<m::PageId>(per_seq));
    const double s = best_of(w.repeat, [&] {
      std::vector<m::DecodeSeq> seqs(batch);
      for (uint32_t b = 0; b < batch; ++b) {
        std::iota(pages[b].begin(), pages[b].end(), b * per_seq);
        const auto prompt = make_prompt(cfg, w.depth, b);
        auto tok = r.prefill_chunk(p.pool, pages[b], 0, {prompt, {}});
        seqs[b] = m::DecodeSeq{pages[b], w.depth, tok ? *tok : m::TokenId{'a'}};
        seqs[b].sampling.logprobs = w.logprobs >= 0;
        seqs[b].sampling.top_logprobs = uint32_t(std::max(0, w.logprobs));
      }
      std::vector<m::TokenId> next(batch);
      std::vector<m::TokenLogprobs> logprobs(w.logprobs >= 0 ? batch : 0);
      auto t0 = clock_type::now();
      for (uint32_t i = 0; i < w.steps; ++i) {
        if (auto st = r.decode_step(p.pool, seqs, next, logprobs); !st) {
          std::fprintf(stderr, "decode: %s\n", st.error().to_string().c_str());
          break;
        }
        for (uint32_t b = 0; b < batch; ++b) {
          seqs[b].length++;
          seqs[b].last_token = next[b] == m::kEos && cfg.checkpoint.empty() ? m::TokenId{'.'} : next[b];
        }
      }
      return seconds_since(t0);
    });
    (batch == 1 ? out.figures.decode1_tps : out.figures.decode8_tps) = double(batch) * w.steps / s;
  }

  if (cfg.checkpoint.empty()) {  // the largest image the preset accepts: a square of max_image_patches
    uint32_t side = 1;
    while ((side + 1) * (side + 1) <= cfg.max_image_patches) ++side;
    const m::Image img = m::make_test_image(side * cfg.patch_size, side * cfg.patch_size, 1);
    out.encode_ms = 1e3 * best_of(w.repeat, [&] {
                      auto t0 = clock_type::now();
                      auto e = r.encode(img);
                      (void)e;
                      return seconds_since(t0);
                    });
  }
  return out;
}

// The shapes --make-checkpoint and --table write (random weights, tied embeddings), by name.
using ShapeFill = void (*)(m::testing::CheckpointSpec&);
const std::vector<std::pair<std::string, ShapeFill>>& checkpoint_shapes() {
  static const std::vector<std::pair<std::string, ShapeFill>> shapes = {
      {"smollm2-135m",
       [](m::testing::CheckpointSpec& s) {
         // SmolLM2-135M: hidden 576, 30 layers, 9 heads, 3 KV heads, FFN 1536, vocab 49152.
         s.vocab = 49152;
         s.d_model = 576;
         s.layers = 30;
         s.heads = 9;
         s.kv_heads = 3;
         s.ffn = 1536;
         s.rope_theta = 100000.0f;
       }},
      {"llama-3.2-1b",
       [](m::testing::CheckpointSpec& s) {
         // Llama-3.2-1B: hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256, Llama 3's
         // frequency factors (rope_freqs).
         s.vocab = 128256;
         s.d_model = 2048;
         s.layers = 16;
         s.heads = 32;
         s.kv_heads = 8;
         s.ffn = 8192;
         s.rope_theta = 500000.0f;
         s.rope_freqs = true;
       }},
      {"qwen2.5-1.5b",
       [](m::testing::CheckpointSpec& s) {
         // Qwen2.5-1.5B: hidden 1536, 28 layers, 12 heads, 2 KV heads, FFN 8960, vocab 151936, Q/K/V biases.
         s.arch = "qwen2";
         s.vocab = 151936;
         s.d_model = 1536;
         s.layers = 28;
         s.heads = 12;
         s.kv_heads = 2;
         s.ffn = 8960;
         s.rope_theta = 1000000.0f;
       }},
      {"qwen3-0.6b",
       [](m::testing::CheckpointSpec& s) {
         // Qwen3-0.6B: hidden 1024, 28 layers, 16 heads of 128, 8 KV heads, FFN 3072, vocab 151936, QK-norm.
         s.arch = "qwen3";
         s.vocab = 151936;
         s.d_model = 1024;
         s.layers = 28;
         s.heads = 16;
         s.kv_heads = 8;
         s.head_dim = 128;
         s.ffn = 3072;
         s.rope_theta = 1000000.0f;
       }},
      {"gemma-3-1b",
       [](m::testing::CheckpointSpec& s) {
         // gemma-3-1b: hidden 1152, 26 layers, 4 heads of 256, 1 KV head, FFN 6912, vocab 262144, a
         // 512-position window on five layers of six.
         s.arch = "gemma3";
         s.vocab = 262144;
         s.d_model = 1152;
         s.layers = 26;
         s.heads = 4;
         s.kv_heads = 1;
         s.head_dim = 256;
         s.ffn = 6912;
         s.rope_theta = 1000000.0f;
         s.rope_base_swa = 10000.0f;
         s.sliding_window = 512;
       }},
      {"phi-4-mini",
       [](m::testing::CheckpointSpec& s) {
         // Phi-4-mini: hidden 3072, 32 layers, 24 heads of 128, 8 KV heads, FFN 8192, vocab 200064,
         // LongRoPE's frequency factors, 96 of each head's 128 dims rotated.
         s.arch = "phi3";
         s.vocab = 200064;
         s.d_model = 3072;
         s.layers = 32;
         s.heads = 24;
         s.kv_heads = 8;
         s.ffn = 8192;
         s.rope_theta = 10000.0f;
         s.rope_dims = 96;
         s.rope_scaling = "longrope";
         s.rope_orig_context = 4096;
         s.rope_attn_factor = 1.19f;
         s.rope_freqs = true;
       }},
      {"qwen3-30b-a3b-scaled",
       [](m::testing::CheckpointSpec& s) {
         // Qwen3-30B-A3B's blocks (hidden 2048, 32 heads of 128, 4 KV heads, 8 routed experts of FFN 768 per
         // row, QK-norm, vocab 151936), scaled down to fit this host: 24 of its 48 layers and 32 of its 128
         // experts per layer. A token's work per layer is the full model's.
         s.arch = "qwen3moe";
         s.vocab = 151936;
         s.d_model = 2048;
         s.layers = 24;
         s.heads = 32;
         s.kv_heads = 4;
         s.head_dim = 128;
         s.ffn = 6144;
         s.experts = 32;
         s.experts_used = 8;
         s.expert_ffn = 768;
         s.rope_theta = 1000000.0f;
       }},
  };
  return shapes;
}

m::testing::CheckpointSpec shape_spec(const std::string& shape, const std::string& file_type) {
  m::testing::CheckpointSpec spec;
  for (const auto& [name, fill] : checkpoint_shapes())
    if (name == shape) fill(spec);
  spec.context = 4096;
  spec.tied = true;
  spec.mixed_dtypes = false;
  spec.shards = 1;
  spec.gguf_file_type = file_type;
  spec.write_hf = false;
  return spec;
}

std::optional<std::string> make_checkpoint(const std::string& shape, const std::string& file_type,
                                           const fs::path& dir) {
  const fs::path gguf = dir / "model.gguf";
  if (fs::exists(gguf)) return gguf.string();  // written by an earlier run
  std::fprintf(stderr, "epd-bench model: writing a random %s checkpoint (%s) into %s\n", shape.c_str(),
               file_type.c_str(), dir.c_str());
  auto paths = m::testing::write_llama_checkpoint(shape_spec(shape, file_type), dir);
  if (!paths) {
    std::fprintf(stderr, "epd-bench model: %s\n", paths.error().to_string().c_str());
    return std::nullopt;
  }
  return paths->gguf;
}

double ratio(double a, double b) {
  return b > 0 ? a / b : 0;
}

struct ModelRow {
  std::string label;
  double file_mb = 0;
  EpdRun epd;
  std::optional<ModelFigures> llama;
};

void print_row(const ModelRow& r) {
  const ModelFigures& e = r.epd.figures;
  std::printf("| %s | %.0f | %.1f | %.1f | %.1f (%.2fx b1) |", r.label.c_str(), r.file_mb, e.prefill_tps,
              e.decode1_tps, e.decode8_tps, ratio(e.decode8_tps, e.decode1_tps));
  if (r.llama)
    std::printf(" %.1f | %.1f | %.1f | %.2fx | %.2fx | %.2fx |\n", r.llama->prefill_tps, r.llama->decode1_tps,
                r.llama->decode8_tps, ratio(e.prefill_tps, r.llama->prefill_tps),
                ratio(e.decode1_tps, r.llama->decode1_tps), ratio(e.decode8_tps, r.llama->decode8_tps));
  else
    std::printf(" - | - | - | - | - | - |\n");
}

void print_header(const ModelWorkload& w, m::DType kv_dtype) {
  std::printf(
      "\n%u threads; prefill: one %u-token prompt; decode: %u steps after %u-token prompts, at batch 1 and "
      "8 (b8 counts all eight sequences' tokens); epd KV cache %s; best of %d. llama.cpp: %s.\n\n",
      w.threads, w.prompt_len, w.steps, w.depth, std::string(m::dtype_name(kv_dtype)).c_str(), w.repeat,
      epd::bench::llama_cpp_description().c_str());
  std::printf(
      "| model | MB | epd prefill tok/s | epd decode b1 | epd decode b8 | llama prefill | llama b1 | llama "
      "b8 | "
      "prefill ratio | b1 ratio | b8 ratio |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
}

std::optional<ModelRow> bench_checkpoint(const std::string& label, const std::string& path,
                                         const ModelWorkload& w, m::DType kv_dtype, bool with_llama) {
  auto cfg = m::load_model_path(path);
  if (!cfg) {
    std::fprintf(stderr, "epd-bench model: %s\n", cfg.error().to_string().c_str());
    return std::nullopt;
  }
  cfg->max_seq = std::max(cfg->max_seq, std::max(w.prompt_len, w.depth + w.steps) + 1);
  ModelRow row;
  row.label = label;
  std::error_code ec;
  row.file_mb = double(fs::file_size(path, ec)) / 1e6;
  auto e = measure_epd(*cfg, w, kv_dtype);
  if (!e) return std::nullopt;
  row.epd = *e;
  std::fprintf(stderr, "epd-bench model: %s: %s\n", label.c_str(), e->kernels.c_str());
  const bool gguf = path.size() > 5 && path.substr(path.size() - 5) == ".gguf";
  if (with_llama && gguf) row.llama = epd::bench::llama_cpp_figures(path, w);
  return row;
}

int bench_presets(const std::vector<std::string>& presets, ModelWorkload w) {
  w.threads = 1;  // the reference model is single-threaded
  for (const auto& name : presets) {
    auto cfg = m::preset(name);
    if (!cfg) {
      std::fprintf(stderr, "epd-bench model: %s\n", cfg.error().to_string().c_str());
      return 1;
    }
    w.depth = std::min(w.depth, cfg->max_seq - w.steps - 1);
    w.prompt_len = std::min(w.prompt_len, cfg->max_seq - 1);
    auto e = measure_epd(*cfg, w, m::DType::f32);
    if (!e) return 1;
    const double flops = matmul_flops_per_token(*cfg);
    const ModelFigures& f = e->figures;
    std::printf(
        "%-6s prompt %4u | prefill %9.0f tok/s (%5.1f GFLOP/s) | decode b1 %7.0f tok/s  b8 %7.0f tok/s "
        "(%5.1f GFLOP/s) at depth %u | encode %u patches %7.2f ms | KV %llu B/token, %.2f MiB per 512 "
        "tokens\n",
        name.c_str(), w.prompt_len, f.prefill_tps, f.prefill_tps * flops / 1e9, f.decode1_tps, f.decode8_tps,
        f.decode8_tps * flops / 1e9, w.depth, cfg->max_image_patches, e->encode_ms,
        static_cast<unsigned long long>(cfg->kv_bytes_per_token()),
        cfg->kv_bytes_per_token() * 512.0 / (1024 * 1024));
  }
  return 0;
}

}  // namespace

int run_model_bench(int argc, char** argv) {
  CLI::App app{
      "epd-bench model: prefill and decode throughput of the reference presets, of a checkpoint, or of a "
      "table of generated checkpoints, each GGUF beside llama.cpp's own llama-bench on the same file"};
  bool quick = false, no_llama = false;
  std::string checkpoint, make_dir, table_dir, kv = "f16";
  std::vector<std::string> presets{"tiny", "bench"};
  std::vector<std::string> shapes{"smollm2-135m", "llama-3.2-1b"}, types{"f32", "q8_0", "q4_k_m"};
  ModelWorkload w;
  app.add_flag("--quick", quick, "short run: 128-token prompt, depth 128, 16 decode steps, 1 repeat");
  app.add_option("--preset", presets, "reference presets to measure (default: tiny bench)");
  app.add_option("--prompt-len", w.prompt_len, "prefill prompt length in tokens")
      ->check(CLI::Range(2u, 8000u));
  app.add_option("--depth", w.depth, "decode: tokens already in each sequence")->check(CLI::Range(1u, 8000u));
  app.add_option("--steps", w.steps, "decode steps per measurement")->check(CLI::Range(1u, 1000u));
  app.add_option("--repeat", w.repeat, "repetitions (best is reported)")->check(CLI::Range(1, 100));
  app.add_option("--logprobs", w.logprobs,
                 "epd's decode steps also compute each token's logprobs and this many alternatives (0..20), "
                 "as a request with logprobs does: their cost")
      ->check(CLI::Range(0, 20));
  app.add_option("--threads", w.threads, "compute threads of checkpoint runs (epd and llama.cpp)")
      ->check(CLI::Range(1u, 256u));
  app.add_option("--kv-dtype", kv, "epd's KV cache element type: f32, f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  app.add_option("--model", checkpoint, "a checkpoint to measure (directory, .gguf, .safetensors)");
  app.add_option(
      "--make-checkpoint", make_dir,
      "write a random checkpoint of --shape and --file-type into this directory (once) and measure it");
  std::string file_type = "f32", shape = "smollm2-135m";
  app.add_option(
      "--file-type", file_type,
      "the made GGUF's tensor types, as llama-quantize names them (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 "
      "q5_1 q2_k q3_k_m q4_k_m q5_k_m q6_k), quantized by llama.cpp's quantizer");
  std::vector<std::string> known_shapes;
  for (const auto& shape : checkpoint_shapes()) known_shapes.push_back(shape.first);
  app.add_option("--shape", shape, "the made checkpoint's shape")->check(CLI::IsMember(known_shapes));
  app.add_option("--table", table_dir,
                 "write (once) and measure every --shapes x --types checkpoint under this directory: the "
                 "markdown table of docs/model.md");
  app.add_option("--shapes", shapes, "shapes of --table")->check(CLI::IsMember(known_shapes));
  app.add_option("--types", types, "file types of --table");
  app.add_flag("--no-llama-cpp", no_llama, "skip llama.cpp");
  bool memory = false;
  app.add_flag("--memory", memory,
               "also start a local cluster on each file and report each role's PSS of the weights");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    w.prompt_len = 128;
    w.depth = 128;
    w.steps = 16;
    w.repeat = 1;
  }
  const m::DType kv_dtype = kv == "f16" ? m::DType::f16 : kv == "bf16" ? m::DType::bf16 : m::DType::f32;

  std::vector<std::pair<std::string, std::string>> runs;  // label, path
  if (!table_dir.empty()) {
    for (const auto& s : shapes)
      for (const auto& t : types) {
        auto path = make_checkpoint(s, t, fs::path(table_dir) / (s + "-" + t));
        if (!path) return 1;
        runs.emplace_back(s + " " + t, *path);
      }
  } else if (!make_dir.empty()) {
    auto path = make_checkpoint(shape, file_type, make_dir);
    if (!path) return 1;
    runs.emplace_back(shape + " " + file_type, *path);
  } else if (!checkpoint.empty()) {
    runs.emplace_back(fs::path(checkpoint).filename().string(), checkpoint);
  } else {
    return bench_presets(presets, w);
  }

  std::vector<ModelRow> rows;
  for (const auto& [label, path] : runs) {
    auto row = bench_checkpoint(label, path, w, kv_dtype, !no_llama);
    if (!row) return 1;
    rows.push_back(*row);
    if (runs.size() > 1) {  // progress, the table comes at the end
      std::fprintf(stderr, "epd-bench model: %s done\n", label.c_str());
    }
  }
  print_header(w, kv_dtype);
  for (const ModelRow& r : rows) print_row(r);
  std::printf("\nGoals: prefill and decode b1 >= 1.0x llama.cpp; epd decode b8 >= 3x its b1.\n");
  if (!memory) return 0;
  std::printf(
      "\nWeights held by the roles of one host (PSS of the model file and of ggml's repacked copies, after "
      "one "
      "request):\n\n| model | file MB | router MB | encoder MB | prefill MB | decode MB | prefill + decode / "
      "file |\n"
      "|---|---|---|---|---|---|---|\n");
  for (const auto& [label, path] : runs) {
    auto roles = epd::bench::measure_role_memory(path, w.threads);
    if (!roles) return 1;
    double router = 0, enc = 0, pre = 0, dec = 0;
    for (const auto& r : *roles) {
      if (r.role == "router") router += r.weights_mb;
      if (r.role == "encoder") enc += r.weights_mb;
      if (r.role == "prefill") pre += r.weights_mb;
      if (r.role == "decode") dec += r.weights_mb;
    }
    std::error_code ec;
    const double file_mb = double(fs::file_size(path, ec)) / (1024 * 1024);
    std::printf("| %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.2fx |\n", label.c_str(), file_mb, router, enc,
                pre, dec, (pre + dec) / file_mb);
  }
  return 0;
}
