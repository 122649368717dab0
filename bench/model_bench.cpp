#include "model_bench.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include "epd/model/llama.hpp"
#include "epd/model/quantize.hpp"
#include "epd/model/runner.hpp"
#include "llama_checkpoint.hpp"

namespace m = epd::model;

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct Pool {
  Pool(const m::ModelConfig& cfg, uint32_t pages) : words(0) {
    pool.layout = m::kv_layout_for(cfg, pages);
    words.assign((pool.layout.total_bytes() + 7) / 8, 0);
    pool.base = reinterpret_cast<std::byte*>(words.data());
  }
  std::vector<uint64_t> words;
  m::KvPool pool;
};

// A prompt of exactly n tokens. Reference model: BOS + printable bytes that differ per sequence.
// Checkpoint: ids (i * 7 + salt * 13) % vocab, as tests/http/node/llama_bench.mjs builds them for llama.cpp.
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

struct Figures {
  double prefill_tps = 0, decode1_tps = 0, decode8_tps = 0, encode_ms = 0;
};

// Best of `repeat` runs of fn() (seconds).
template <class F>
double best_of(int repeat, F&& fn) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) best = std::min(best, fn());
  return best;
}

// A preset name, or (checkpoint set) a checkpoint path with `threads`.
bool bench_model(const std::string& name, const std::string& checkpoint, uint32_t threads,
                 uint32_t prompt_len, uint32_t steps, int repeat, Figures& f) {
  auto cfg = checkpoint.empty() ? m::preset(name) : m::load_model_path(checkpoint);
  if (cfg) cfg->threads = threads;
  auto runner_r = cfg ? m::make_runner(*cfg) : cfg.error();
  if (!runner_r) {
    std::fprintf(stderr, "epd-bench model: %s\n", runner_r.error().to_string().c_str());
    return false;
  }
  m::ModelRunner& r = **runner_r;
  const uint32_t ps = cfg->page_size;
  const uint32_t per_seq = (prompt_len + steps + ps) / ps;

  // Prefill: the whole prompt as one chunk, into a fresh sequence each time.
  {
    Pool p(*cfg, per_seq);
    std::vector<m::PageId> pages(per_seq);
    std::iota(pages.begin(), pages.end(), 0);
    const auto prompt = make_prompt(*cfg, prompt_len, 0);
    const double s = best_of(repeat, [&] {
      auto t0 = clock_type::now();
      auto tok = r.prefill_chunk(p.pool, pages, 0, {prompt, {}});
      if (!tok) std::fprintf(stderr, "prefill: %s\n", tok.error().to_string().c_str());
      return seconds_since(t0);
    });
    f.prefill_tps = prompt_len / s;
  }

  // Decode at batch 1 and 8: prefill each sequence, then time `steps` batched steps.
  for (uint32_t batch : {1u, 8u}) {
    Pool p(*cfg, per_seq * batch);
    std::vector<std::vector<m::PageId>> pages(batch, std::vector<m::PageId>(per_seq));
    const uint32_t dlen = std::min<uint32_t>(prompt_len, 64);
    const double s = best_of(repeat, [&] {
      std::vector<m::DecodeSeq> seqs(batch);
      for (uint32_t b = 0; b < batch; ++b) {
        std::iota(pages[b].begin(), pages[b].end(), b * per_seq);
        const auto prompt = make_prompt(*cfg, dlen, b);
        auto tok = r.prefill_chunk(p.pool, pages[b], 0, {prompt, {}});
        seqs[b] = m::DecodeSeq{pages[b], dlen, tok ? *tok : m::TokenId{'a'}};
      }
      std::vector<m::TokenId> next(batch);
      auto t0 = clock_type::now();
      for (uint32_t i = 0; i < steps; ++i) {
        if (auto st = r.decode_step(p.pool, seqs, next); !st) {
          std::fprintf(stderr, "decode: %s\n", st.error().to_string().c_str());
          break;
        }
        for (uint32_t b = 0; b < batch; ++b) {
          seqs[b].length++;
          seqs[b].last_token = next[b] == m::kEos && checkpoint.empty() ? m::TokenId{'.'} : next[b];
        }
      }
      return seconds_since(t0);
    });
    (batch == 1 ? f.decode1_tps : f.decode8_tps) = double(batch) * steps / s;
  }

  // Encode the largest image the preset accepts (a square of max_image_patches patches); checkpoints are
  // text-only.
  if (checkpoint.empty()) {
    uint32_t side = 1;
    while ((side + 1) * (side + 1) <= cfg->max_image_patches) ++side;
    const m::Image img = m::make_test_image(side * cfg->patch_size, side * cfg->patch_size, 1);
    f.encode_ms = 1e3 * best_of(repeat, [&] {
                    auto t0 = clock_type::now();
                    auto e = r.encode(img);
                    (void)e;
                    return seconds_since(t0);
                  });
  }

  const double flops = matmul_flops_per_token(*cfg);
  if (!checkpoint.empty()) {
    std::printf(
        "epd       %s (%u threads, OpenBLAS %s, ggml-cpu %s) | prefill %7.1f tok/s (%5.1f GFLOP/s, %u-token "
        "prompt) | decode b1 %6.1f tok/s  b8 %6.1f tok/s (%.2fx b1)\n",
        cfg->name.c_str(), threads, m::prefill_blas_core().c_str(),
        m::ggml_cpu_variant() ? m::ggml_cpu_variant()->c_str() : "unavailable", f.prefill_tps,
        f.prefill_tps * flops / 1e9, prompt_len, f.decode1_tps, f.decode8_tps, f.decode8_tps / f.decode1_tps);
    return true;
  }
  std::printf(
      "%-6s prompt %4u | prefill %9.0f tok/s (%5.1f GFLOP/s) | decode b1 %7.0f tok/s  b8 %7.0f tok/s "
      "(%5.1f GFLOP/s) | encode %u patches %7.2f ms | KV %llu B/token, %.2f MiB per 512 tokens\n",
      name.c_str(), prompt_len, f.prefill_tps, f.prefill_tps * flops / 1e9, f.decode1_tps, f.decode8_tps,
      f.decode8_tps * flops / 1e9, cfg->max_image_patches, f.encode_ms,
      static_cast<unsigned long long>(cfg->kv_bytes_per_token()),
      cfg->kv_bytes_per_token() * 512.0 / (1024 * 1024));
  return true;
}

}  // namespace

// llama.cpp on the same GGUF through node-llama-cpp (tests/http/node/llama_bench.mjs); false if it cannot
// run.
bool bench_llama_cpp(const std::string& gguf, uint32_t vocab, uint32_t threads, uint32_t prompt_len,
                     uint32_t steps, int repeat, Figures& f) {
  const std::string node_dir = std::string(EPD_SOURCE_DIR) + "/tests/http/node";
  const std::string spec_path =
      (std::filesystem::temp_directory_path() / ("epd-bench-llama-" + std::to_string(::getpid()) + ".json"))
          .string();
  std::ofstream(spec_path) << nlohmann::json{
      {"model", gguf},  {"prompt_len", prompt_len}, {"decode_prompt_len", std::min<uint32_t>(prompt_len, 64)},
      {"steps", steps}, {"repeat", repeat},         {"threads", threads},
      {"vocab", vocab}}.dump();
  FILE* p = ::popen(("node " + node_dir + "/llama_bench.mjs " + spec_path).c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = p ? ::pclose(p) : -1;
  std::filesystem::remove(spec_path);
  const auto j = nlohmann::json::parse(out, nullptr, false);
  if (status != 0 || !j.is_object()) {
    std::fprintf(
        stderr,
        "epd-bench model: llama.cpp (node %s/llama_bench.mjs; scripts/setup-deps installs it) failed\n",
        node_dir.c_str());
    return false;
  }
  f.prefill_tps = j.value("prefill_tps", 0.0);
  f.decode1_tps = j.value("decode1_tps", 0.0);
  f.decode8_tps = j.value("decode8_tps", 0.0);
  std::printf(
      "llama.cpp same GGUF (%u threads)    | prefill %7.1f tok/s | decode b1 %6.1f tok/s  b8 %6.1f tok/s "
      "(%.2fx b1)\n",
      threads, f.prefill_tps, f.decode1_tps, f.decode8_tps, f.decode8_tps / f.decode1_tps);
  return true;
}

int run_model_bench(int argc, char** argv) {
  CLI::App app{"epd-bench model: model throughput (reference presets single-threaded, or a checkpoint)"};
  bool quick = false, no_llama = false;
  std::string checkpoint, make_dir;
  uint32_t threads = 1;
  std::vector<std::string> presets{"tiny", "bench"};
  uint32_t prompt_len = 512, steps = 64;
  int repeat = 3;
  app.add_flag("--quick", quick, "short run: 128-token prompt, 16 decode steps, 1 repeat");
  app.add_option("--preset", presets, "presets to measure (default: tiny bench)");
  app.add_option("--prompt-len", prompt_len, "prefill prompt length in tokens")->check(CLI::Range(2u, 2000u));
  app.add_option("--steps", steps, "decode steps per measurement")->check(CLI::Range(1u, 1000u));
  app.add_option("--repeat", repeat, "repetitions (best is reported)")->check(CLI::Range(1, 100));
  app.add_option(
      "--model", checkpoint,
      "a checkpoint to measure (directory, .gguf, .safetensors); with a .gguf llama.cpp runs beside it");
  std::string file_type = "f32", shape = "smollm2-135m";
  app.add_option("--make-checkpoint", make_dir,
                 "write a random checkpoint into this directory (HF + model.gguf) and measure its GGUF");
  app.add_option(
      "--file-type", file_type,
      "the made GGUF's tensor types, as llama-quantize names them (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 "
      "q5_1 q2_k q3_k_m q4_k_m q5_k_m q6_k), quantized by llama.cpp's quantizer");
  app.add_option("--shape", shape, "the made checkpoint's shape: smollm2-135m or llama-3.2-1b")
      ->check(CLI::IsMember({"smollm2-135m", "llama-3.2-1b"}));
  app.add_option("--threads", threads, "compute threads (checkpoint runner and llama.cpp)")
      ->check(CLI::Range(1u, 256u));
  app.add_flag("--no-llama-cpp", no_llama, "skip llama.cpp");
  CLI11_PARSE(app, argc, argv);
  if (!make_dir.empty()) {
    epd::model::testing::CheckpointSpec spec;
    if (shape == "smollm2-135m") {
      // SmolLM2-135M: hidden 576, 30 layers, 9 heads, 3 KV heads, FFN 1536, vocab 49152, tied embeddings.
      spec.vocab = 49152;
      spec.d_model = 576;
      spec.layers = 30;
      spec.heads = 9;
      spec.kv_heads = 3;
      spec.ffn = 1536;
      spec.rope_theta = 100000.0f;
    } else {
      // Llama-3.2-1B: hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256, tied (its
      // llama3 RoPE scaling left out: epd refuses it, and it changes no cost).
      spec.vocab = 128256;
      spec.d_model = 2048;
      spec.layers = 16;
      spec.heads = 32;
      spec.kv_heads = 8;
      spec.ffn = 8192;
      spec.rope_theta = 500000.0f;
    }
    spec.context = 2048;
    spec.tied = true;
    spec.mixed_dtypes = false;
    spec.shards = 1;
    spec.gguf_file_type = file_type;
    spec.write_hf = false;
    auto paths = epd::model::testing::write_llama_checkpoint(spec, make_dir);
    if (!paths) {
      std::fprintf(stderr, "epd-bench model: %s\n", paths.error().to_string().c_str());
      return 1;
    }
    checkpoint = paths->gguf;
  }
  if (!checkpoint.empty()) {
    if (quick) {
      prompt_len = 128;
      steps = 16;
      repeat = 1;
    }
    Figures e, l;
    if (!bench_model("", checkpoint, threads, prompt_len, steps, repeat, e)) return 1;
    const bool gguf = checkpoint.size() > 5 && checkpoint.substr(checkpoint.size() - 5) == ".gguf";
    if (no_llama || !gguf) return 0;
    auto cfg = m::load_model_path(checkpoint);
    if (!cfg || !bench_llama_cpp(checkpoint, cfg->vocab, threads, prompt_len, steps, repeat, l)) return 1;
    std::printf(
        "epd / llama.cpp: prefill %.2fx (goal >= 0.8) | decode b1 %.2fx (goal >= 0.8) | epd decode b8 / "
        "epd b1 %.2fx (goal >= 2)\n",
        e.prefill_tps / l.prefill_tps, e.decode1_tps / l.decode1_tps, e.decode8_tps / e.decode1_tps);
    return 0;
  }
  if (quick) {
    prompt_len = 128;
    steps = 16;
    repeat = 1;
  }
  for (const auto& name : presets) {
    Figures f;
    if (!bench_model(name, "", 1, prompt_len, steps, repeat, f)) return 1;
  }
  return 0;
}
