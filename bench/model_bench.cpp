#include "model_bench.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "epd/model/runner.hpp"

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

// A prompt of exactly n tokens: BOS + printable bytes that differ per sequence.
std::vector<m::TokenId> make_prompt(uint32_t n, uint32_t salt) {
  std::vector<m::TokenId> p{m::kBos};
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

bool bench_preset(const std::string& name, uint32_t prompt_len, uint32_t steps, int repeat, Figures& f) {
  auto cfg = m::preset(name);
  auto runner_r = cfg ? m::make_reference_runner(*cfg) : cfg.error();
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
    const auto prompt = make_prompt(prompt_len, 0);
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
        const auto prompt = make_prompt(dlen, b);
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
          seqs[b].last_token = next[b] == m::kEos ? m::TokenId{'.'} : next[b];
        }
      }
      return seconds_since(t0);
    });
    (batch == 1 ? f.decode1_tps : f.decode8_tps) = double(batch) * steps / s;
  }

  // Encode the largest image the preset accepts (a square of max_image_patches patches).
  {
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

int run_model_bench(int argc, char** argv) {
  CLI::App app{"epd-bench model: reference model throughput (single thread)"};
  bool quick = false;
  std::vector<std::string> presets{"tiny", "bench"};
  uint32_t prompt_len = 512, steps = 64;
  int repeat = 3;
  app.add_flag("--quick", quick, "short run: 128-token prompt, 16 decode steps, 1 repeat");
  app.add_option("--preset", presets, "presets to measure (default: tiny bench)");
  app.add_option("--prompt-len", prompt_len, "prefill prompt length in tokens")->check(CLI::Range(2u, 2000u));
  app.add_option("--steps", steps, "decode steps per measurement")->check(CLI::Range(1u, 1000u));
  app.add_option("--repeat", repeat, "repetitions (best is reported)")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    prompt_len = 128;
    steps = 16;
    repeat = 1;
  }
  for (const auto& name : presets) {
    Figures f;
    if (!bench_preset(name, prompt_len, steps, repeat, f)) return 1;
  }
  return 0;
}
