// llama.cpp as the independent oracle of epd's Llama-family runner: a random checkpoint (hidden 64, 2 layers,
// 4 heads, 2 KV heads) is written as a Hugging Face directory and as GGUF; llama.cpp (node-llama-cpp's
// prebuilt CPU build, tests/http/node/llama_oracle.mjs; F32 KV cache, no flash attention) evaluates the GGUF.
// Pass: epd's logits within 1e-4 of llama.cpp's, relative to the largest logit, at every position of a
// 64-token prompt, and the same 32 greedy tokens, from both files. Then GGUF files in F16, Q8_0, Q4_0 and
// Q4_K_M (quantized by llama.cpp's own quantizer) against llama.cpp on the same file.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "epd/model/generate.hpp"
#include "epd/model/llama.hpp"
#include "helpers.hpp"
#include "llama_checkpoint.hpp"

namespace {

namespace fs = std::filesystem;
using namespace epd::model;
using nlohmann::json;

const std::string kNodeDir = std::string(EPD_SOURCE_DIR) + "/tests/http/node";

// Runs node on the oracle script; its stdout is the JSON answer (stderr passes through to the test log).
// $EPD_ORACLE_NODE_DIR: a copy of the node tree whose llama.cpp has one CPU variant (oracle_tree_for).
json run_oracle(const json& spec, const fs::path& dir) {
  const fs::path spec_file = dir / "oracle-spec.json";
  std::ofstream(spec_file) << spec.dump();
  REQUIRE(fs::exists(kNodeDir + "/node_modules/node-llama-cpp"));  // scripts/setup-deps installs it
  const char* tree = std::getenv("EPD_ORACLE_NODE_DIR");
  const std::string cmd = tree && *tree
                              ? "timeout 120 node --preserve-symlinks --preserve-symlinks-main " +
                                    std::string(tree) + "/llama_oracle.mjs " + spec_file.string()
                              : "timeout 120 node " + kNodeDir + "/llama_oracle.mjs " + spec_file.string();
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  INFO("node output: " << out.substr(0, 500));
  REQUIRE(status == 0);
  json j = json::parse(out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

struct EpdRun {
  std::vector<std::vector<float>> prompt_logits;
  std::vector<TokenId> greedy;
  std::vector<double> margins;   // each greedy token's logit lead over the runner-up
  std::vector<float> routing;    // experts: each prompt position's routing margin (LlamaRunner)
  TokenLogprobs first_logprobs;  // the first token's, with 20 alternatives, as prefill reports them
};

EpdRun run_epd(const std::string& path, const std::vector<TokenId>& prompt, uint32_t generate) {
  auto cfg = read_checkpoint_config(path);
  REQUIRE(cfg.ok());
  auto r = make_llama_runner(*cfg);
  if (!r) FAIL(r.error().detail);
  LlamaRunner& runner = **r;
  epd::model::test::TestPool pool(*cfg, 16);
  std::vector<PageId> pages(16);
  for (PageId i = 0; i < 16; ++i) pages[i] = i;
  EpdRun out;
  runner.keep_all_logits(true);
  PrefillChunk chunk{prompt, {}};
  chunk.sampling.logprobs = true;  // never changes the draw: greedy tokens are compared below
  chunk.sampling.top_logprobs = kMaxTopLogprobs;
  chunk.logprobs = &out.first_logprobs;
  auto first = runner.prefill_chunk(pool.pool, pages, 0, chunk);
  REQUIRE(first.ok());
  const auto routing = runner.routing_margins();
  out.routing.assign(routing.begin(), routing.end());
  const auto all = runner.last_logits();
  for (size_t i = 0; i < prompt.size(); ++i)
    out.prompt_logits.emplace_back(all.begin() + i * cfg->vocab, all.begin() + (i + 1) * cfg->vocab);
  runner.keep_all_logits(false);
  DecodeSeq seq{pages, static_cast<uint32_t>(prompt.size()), *first};
  seq.sampling.logprobs = true;  // the runner-up's logprob: how close each greedy choice was
  seq.sampling.top_logprobs = 2;
  out.greedy.push_back(*first);
  out.margins.push_back(out.first_logprobs.top[0].logprob - out.first_logprobs.top[1].logprob);
  while (out.greedy.size() < generate) {
    TokenId t = 0;
    TokenLogprobs lp;
    REQUIRE(runner.decode_step(pool.pool, {&seq, 1}, {&t, 1}, {&lp, 1}).ok());
    REQUIRE(lp.top.size() == 2);
    out.margins.push_back(lp.top[0].logprob - lp.top[1].logprob);
    out.greedy.push_back(t);
    seq.length += 1;
    seq.last_token = t;
  }
  return out;
}

// The logits gap and the greedy tokens of epd against llama.cpp's on one file.
void compare_with_oracle(const std::string& path, const std::vector<TokenId>& prompt, uint32_t generate,
                         const json& oracle, double tolerance) {
  const auto ref_logits = oracle["prompt_logits"].get<std::vector<std::vector<float>>>();
  const auto ref_greedy = oracle["greedy"].get<std::vector<TokenId>>();
  REQUIRE(ref_logits.size() == prompt.size());
  REQUIRE(ref_greedy.size() == generate);
  INFO("checkpoint " << path);
  const EpdRun got = run_epd(path, prompt, generate);
  double worst = 0;
  size_t near_ties = 0;
  for (size_t p = 0; p < prompt.size(); ++p) {
    REQUIRE(got.prompt_logits[p].size() == ref_logits[p].size());
    // A mixture of experts routes by a top k, a step function. The router's input differs between the two
    // sides by about the relative gap the logits are allowed (the tolerance), so its logits may each be off
    // by that much of their largest: where the last expert taken leads the best one left out by less than
    // twice that, the other side may take the other expert, and that position's hidden state (not the
    // ones after it, which only attend to it) is another sum of experts. Such positions are left out of the
    // bound, and at least half the positions must be compared.
    if (!got.routing.empty() && got.routing[p] < 2 * tolerance) {
      ++near_ties;
      continue;
    }
    float top = 0;
    for (float v : ref_logits[p]) top = std::max(top, std::fabs(v));
    for (size_t t = 0; t < ref_logits[p].size(); ++t) {
      const double gap = std::fabs(double{got.prompt_logits[p][t]} - ref_logits[p][t]) / top;
      worst = std::isfinite(gap) ? std::max(worst, gap) : INFINITY;  // a NaN logit is a failure, not 0
    }
  }
  INFO("largest logit difference relative to the largest logit: " << worst << " (" << near_ties
                                                                  << " positions routed at a near-tie)");
  CHECK(worst <= tolerance);
  CHECK(near_ties <= prompt.size() / 2);
  // The same greedy tokens, up to a fork the tolerance allows: where epd's best token leads the runner-up
  // by less than twice the largest logit difference the tolerance admits (a logprob difference is a logit
  // difference), llama.cpp may pick the runner-up, and the two continuations are different texts from there
  // on. At 1e-4 that is a tie; quantized files may fork at a near-tie.
  float last_top = 0;
  for (float v : ref_logits.back()) last_top = std::max(last_top, std::fabs(v));
  size_t same = 0;
  while (same < ref_greedy.size() && got.greedy[same] == ref_greedy[same]) ++same;
  if (same < ref_greedy.size()) {
    INFO("greedy tokens fork at " << same << ": epd " << got.greedy[same] << ", llama.cpp "
                                  << ref_greedy[same] << ", epd's lead over its runner-up "
                                  << got.margins[same]);
    CHECK(got.margins[same] <= 2 * tolerance * last_top);
    CHECK(same >= ref_greedy.size() / 2);
  }
  // The first token's logprobs (OpenAI's logprobs, prefill's) against the log-softmax of llama.cpp's last
  // prompt logits, computed here in double: within what the logit gap allows (a logprob moves by at most
  // twice the largest logit difference), and the 20 alternatives are llama.cpp's 20 most likely.
  const auto& last = ref_logits.back();
  float top = 0;
  for (float v : last) top = std::max(top, std::fabs(v));
  const double m = *std::max_element(last.begin(), last.end());
  double sum = 0;
  for (float v : last) sum += std::exp(double(v) - m);
  auto ref_lp = [&](TokenId t) { return double(last[t]) - m - std::log(sum); };
  const double lp_tolerance = 2 * tolerance * top + 1e-6;
  std::vector<double> sorted;
  for (TokenId t = 0; t < last.size(); ++t) sorted.push_back(ref_lp(t));
  std::sort(sorted.rbegin(), sorted.rend());
  double lp_worst = std::fabs(got.first_logprobs.logprob - ref_lp(ref_greedy[0]));
  REQUIRE(got.first_logprobs.top.size() == kMaxTopLogprobs);
  CHECK(got.first_logprobs.top[0].id == ref_greedy[0]);
  for (const TopLogprob& alt : got.first_logprobs.top) {
    lp_worst = std::max(lp_worst, std::fabs(alt.logprob - ref_lp(alt.id)));
    CHECK(ref_lp(alt.id) >= sorted[kMaxTopLogprobs - 1] - 2 * lp_tolerance);  // among llama.cpp's best 20
  }
  INFO("largest first-token logprob difference: " << lp_worst << " (allowed " << lp_tolerance << ")");
  CHECK(lp_worst <= lp_tolerance);
  // The comparison means something: the greedy continuation is not one repeated token.
  CHECK(std::set<TokenId>(ref_greedy.begin(), ref_greedy.end()).size() > 3);
  std::printf(
      "llama.cpp oracle, %s: max |logit diff| / max |logit| = %.3g over %zu positions (%zu routed at a "
      "near-tie left out), %zu of %zu greedy tokens equal%s, first token's logprobs within %.3g\n",
      path.c_str(), worst, prompt.size() - near_ties, near_ties, same, got.greedy.size(),
      same < got.greedy.size() ? " (then a near-tie)" : "", lp_worst);
}

std::vector<TokenId> oracle_prompt(uint32_t vocab) {
  std::vector<TokenId> prompt(64);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>((i * 131 + 17) % vocab);
  return prompt;
}

}  // namespace

TEST_CASE("Llama runner matches llama.cpp logits and greedy tokens from safetensors and GGUF") {
  const fs::path dir = fs::temp_directory_path() / ("epd-oracle-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  testing::CheckpointSpec spec;  // hidden 64, 2 layers, 4 heads, 2 KV heads, vocab 384, mixed dtypes
  auto paths = testing::write_llama_checkpoint(spec, dir);
  REQUIRE(paths.ok());
  const auto prompt = oracle_prompt(spec.vocab);
  constexpr uint32_t kGenerate = 32;
  const json oracle = run_oracle({{"model", paths->gguf}, {"prompt", prompt}, {"generate", kGenerate}}, dir);
  for (const std::string& path : {paths->hf_dir, paths->gguf})
    compare_with_oracle(path, prompt, kGenerate, oracle, 1e-4);
  fs::remove_all(dir);
}

TEST_CASE("Quantized GGUF files run on ggml's kernels as llama.cpp runs them") {
  // Hidden 256 and ffn 512: rows of whole k-quant super-blocks; the 64-wide model exercises the fallbacks.
  // Tolerances: the activations are rounded to 8 bits (f16 for f16 weights) before each product, in
  // llama.cpp as in epd, and that rounding is a step function: a last-bit difference upstream (llama.cpp's
  // RMSNorm sums in double, epd's in float) moves a value across a step now and then, and this random
  // model's sharp attention amplifies the step (measured: 5.5e-4 f16, 3.9e-3 Q8_0, 8.9e-3 Q4_0, 5.9e-4 and
  // 1.7e-2 Q4_K_M). The greedy tokens must be the same.
  const struct {
    const char* file_type;
    uint32_t d_model, ffn;
    double tolerance;
  } cases[] = {{"f16", 256, 512, 2e-3},
               {"q8_0", 256, 512, 3e-2},
               {"q4_0", 256, 512, 3e-2},
               {"q4_k_m", 256, 512, 3e-2},
               {"q4_k_m", 64, 192, 3e-2}};
  for (const auto& c : cases) {
    const fs::path dir = fs::temp_directory_path() / ("epd-oracle-" + std::to_string(::getpid()) + "-" +
                                                      c.file_type + "-" + std::to_string(c.d_model));
    fs::create_directories(dir);
    testing::CheckpointSpec spec;
    spec.d_model = c.d_model;
    spec.ffn = c.ffn;
    spec.gguf_file_type = c.file_type;
    auto paths = testing::write_llama_checkpoint(spec, dir);
    REQUIRE(paths.ok());
    const auto prompt = oracle_prompt(spec.vocab);
    constexpr uint32_t kGenerate = 24;
    const json oracle =
        run_oracle({{"model", paths->gguf}, {"prompt", prompt}, {"generate", kGenerate}}, dir);
    INFO("file type " << c.file_type << ", hidden " << c.d_model);
    compare_with_oracle(paths->gguf, prompt, kGenerate, oracle, c.tolerance);
    fs::remove_all(dir);
  }
}

// Every family epd runs, written to llama.cpp's layout with random weights and checked against llama.cpp on
// the same file: the logits at all 64 prompt positions and 24 greedy tokens. Each case turns on what its
// family computes beyond Llama's blocks, at a shape where it matters: RoPE frequency factors and scaling
// whose knee falls inside the prompt, biases, QK-norm, post norms with GeGLU, a sliding window of 16
// positions (the prompt crosses it four times) with its own RoPE base, fused matrices, partial rotation.
// f32 files within 1e-4 of the largest logit (both sides compute in f32; what differs is the order of sums
// and llama.cpp's float RoPE angles against epd's double ones), quantized ones within 3e-2 (the argument
// of the test above). Gemma's GeGLU rounds its input to f16 to index a table of f16 values, in llama.cpp as
// in epd: like the activations of an f16 file, a last-bit difference upstream may move an input across an
// f16 step (2^-11 relative), so its f32 file gets the F16 file's 2e-3.
TEST_CASE("Every checkpoint family matches llama.cpp's logits and greedy tokens") {
  struct Case {
    const char* label;
    testing::CheckpointSpec spec;
    double tolerance;
  };
  auto spec = [](const char* arch) {
    testing::CheckpointSpec s;
    s.arch = arch;
    s.write_hf = false;
    s.mixed_dtypes = false;
    return s;
  };
  std::vector<Case> cases;
  {
    auto s = spec("llama");  // Llama 3.1-3.3: rope_freqs with the factors of an original context of 256
    s.rope_freqs = true;
    s.rope_theta = 500000.0f;
    cases.push_back({"llama, rope_freqs", s, 1e-4});
    s.gguf_file_type = "q4_k_m";
    s.d_model = 256;
    s.ffn = 512;
    cases.push_back({"llama, rope_freqs, Q4_K_M", s, 3e-2});
  }
  {
    auto s = spec("llama");  // biases on Q/K/V and the attention output; linear scaling x4
    s.qkv_bias = s.out_bias = true;
    s.rope_scaling = "linear";
    s.rope_factor = 4;
    cases.push_back({"llama, biases, linear x4", s, 1e-4});
  }
  {
    auto s = spec("llama");  // YaRN x4 from an original context of 32, and one fused QKV matrix
    s.rope_scaling = "yarn";
    s.rope_factor = 4;
    s.rope_orig_context = 32;
    s.fused_qkv = true;
    cases.push_back({"llama, fused QKV, YaRN x4", s, 1e-4});
  }
  cases.push_back({"mistral3", spec("mistral3"), 1e-4});
  {
    auto s = spec("mistral3");  // YaRN x4 with its own beta and a log multiplier of the attention factor
    s.rope_scaling = "yarn";
    s.rope_factor = 4;
    s.rope_orig_context = 32;
    s.extra_f32_keys = {{"mistral3.rope.scaling.yarn_beta_fast", 16.0f},
                        {"mistral3.rope.scaling.yarn_log_multiplier", 1.0f}};
    cases.push_back({"mistral3, YaRN x4, log multiplier", s, 1e-4});
  }
  {
    auto s = spec("qwen2");  // Q/K/V biases, NEOX rotation
    s.rope_theta = 1000000.0f;
    cases.push_back({"qwen2", s, 1e-4});
    s.gguf_file_type = "q8_0";
    s.d_model = 256;
    s.ffn = 512;
    cases.push_back({"qwen2, Q8_0", s, 3e-2});
    auto y = spec("qwen2");
    y.rope_scaling = "yarn";
    y.rope_factor = 4;
    y.rope_orig_context = 32;
    cases.push_back({"qwen2, YaRN x4", y, 1e-4});
  }
  {
    // Qwen2-VL's language model: qwen2's blocks with M-RoPE, whose sections turn by one position on text
    // (the image side: vision_test.cpp). A head of 16 is 8 pairs: 2 by t, 3 by y, 3 by x.
    auto s = spec("qwen2vl");
    s.rope_theta = 1000000.0f;
    s.rope_sections = {2, 3, 3, 0};
    cases.push_back({"qwen2vl, text", s, 1e-4});
  }
  {
    auto s = spec("qwen3");  // QK-norm; a head dim that is not d_model / heads
    s.head_dim = 32;
    s.rope_theta = 1000000.0f;
    cases.push_back({"qwen3, head dim 32", s, 1e-4});
    s.gguf_file_type = "q4_k_m";
    s.d_model = 256;
    s.ffn = 512;
    s.head_dim = 64;
    cases.push_back({"qwen3, Q4_K_M", s, 3e-2});
  }
  {
    auto s = spec("qwen3moe");  // 8 experts of 64, the best 2 of each row, weights renormalised
    cases.push_back({"qwen3moe, 2 of 8 experts", s, 1e-4});
    s.gguf_file_type = "q4_k_m";
    s.d_model = 256;
    s.ffn = 512;
    s.expert_ffn = 256;
    cases.push_back({"qwen3moe, Q4_K_M", s, 3e-2});
  }
  {
    auto s = spec("gemma3");  // layer 0 slides over 16 positions (base 10000), layer 1 is global (1e6, x8)
    s.head_dim = 32;
    s.sliding_window = 16;
    s.swa_pattern = 2;
    s.rope_theta = 1000000.0f;
    s.rope_base_swa = 10000.0f;
    s.rope_scaling = "linear";
    s.rope_factor = 8;
    cases.push_back({"gemma3, sliding window 16", s, 2e-3});
    s.gguf_file_type = "q8_0";
    s.d_model = 256;
    s.ffn = 512;
    cases.push_back({"gemma3, Q8_0", s, 3e-2});
  }
  {
    auto s = spec("phi3");  // fused QKV and gate/up, LongRoPE (long factors: context 96 > 32), 12 of 16 dims
    s.rope_dims = 12;
    s.rope_scaling = "longrope";
    s.rope_orig_context = 32;
    s.rope_attn_factor = 1.19f;
    s.rope_freqs = true;
    s.context = 96;
    cases.push_back({"phi3, LongRoPE, partial rotation", s, 1e-4});
  }
  for (const Case& c : cases) {
    const fs::path dir = fs::temp_directory_path() / ("epd-family-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto paths = testing::write_llama_checkpoint(c.spec, dir);
    REQUIRE(paths.ok());
    const auto prompt = oracle_prompt(c.spec.vocab);
    constexpr uint32_t kGenerate = 24;
    const json oracle =
        run_oracle({{"model", paths->gguf}, {"prompt", prompt}, {"generate", kGenerate}}, dir);
    INFO("case " << c.label);
    std::printf("%s: ", c.label);
    compare_with_oracle(paths->gguf, prompt, kGenerate, oracle, c.tolerance);
    fs::remove_all(dir);
  }
}

namespace {

// The prebuilt CPU variants of llama.cpp's ggml (one libggml-cpu-<isa>.so each) that this CPU can run: the
// ones whose own ggml_backend_score() is positive, as ggml's loader decides.
std::vector<std::string> runnable_variants() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(EPD_GGML_DIR)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("libggml-cpu-") || !name.ends_with(".so")) continue;
    void* h = ::dlopen(e.path().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    auto score = reinterpret_cast<int (*)()>(::dlsym(h, "ggml_backend_score"));
    if (score && score() > 0) out.push_back(name.substr(12, name.size() - 15));
    ::dlclose(h);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A copy of the node tree whose llama.cpp can load only `variant`'s CPU back end: every package linked,
// but node-llama-cpp's prebuilt binaries copied without the other variants (node runs it with
// --preserve-symlinks, so the package finds its binaries in the copy).
fs::path oracle_tree_for(const std::string& variant, const fs::path& root) {
  const fs::path modules = fs::path(kNodeDir) / "node_modules", out = root / ("node-" + variant);
  fs::create_directories(out / "node_modules/@node-llama-cpp");
  for (const auto& e : fs::directory_iterator(modules))
    if (e.path().filename() != "@node-llama-cpp")
      fs::create_directory_symlink(e.path(), out / "node_modules" / e.path().filename());
  for (const auto& e : fs::directory_iterator(modules / "@node-llama-cpp"))
    if (e.path().filename() != "linux-x64")
      fs::create_directory_symlink(e.path(), out / "node_modules/@node-llama-cpp" / e.path().filename());
  const fs::path pkg = modules / "@node-llama-cpp/linux-x64",
                 copy = out / "node_modules/@node-llama-cpp/linux-x64";
  fs::create_directories(copy / "bins/linux-x64");
  fs::copy(pkg / "dist", copy / "dist", fs::copy_options::recursive);
  fs::copy_file(pkg / "package.json", copy / "package.json");
  for (const auto& e : fs::directory_iterator(pkg / "bins/linux-x64")) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("libggml-cpu-") && name != "libggml-cpu-" + variant + ".so") continue;
    fs::copy_file(e.path(), copy / "bins/linux-x64" / name);
  }
  fs::copy_file(fs::path(kNodeDir) / "llama_oracle.mjs", out / "llama_oracle.mjs");
  return out;
}

}  // namespace

// Run by the test below in a child process, once per variant: epd on the variant $EPD_GGML_CPU names,
// llama.cpp on the same one ($EPD_ORACLE_NODE_DIR), the files whose kernels differ between instruction sets.
TEST_CASE("one CPU variant: F16, Q8_0 and Q4_K_M files match llama.cpp on the same variant", "[.variant]") {
  REQUIRE(std::getenv("EPD_GGML_CPU"));
  REQUIRE(std::getenv("EPD_ORACLE_NODE_DIR"));
  for (const auto& [type, tolerance] : {std::pair{"f16", 2e-3}, {"q8_0", 3e-2}, {"q4_k_m", 3e-2}}) {
    const fs::path dir =
        fs::temp_directory_path() / ("epd-variant-" + std::to_string(::getpid()) + "-" + std::string(type));
    fs::create_directories(dir);
    testing::CheckpointSpec spec;
    spec.d_model = 256;
    spec.ffn = 512;
    spec.gguf_file_type = type;
    auto paths = testing::write_llama_checkpoint(spec, dir);
    REQUIRE(paths.ok());
    const auto prompt = oracle_prompt(spec.vocab);
    const json oracle = run_oracle({{"model", paths->gguf}, {"prompt", prompt}, {"generate", 24}}, dir);
    std::printf("%s, %s: ", std::getenv("EPD_GGML_CPU"), type);
    compare_with_oracle(paths->gguf, prompt, 24, oracle, tolerance);
    fs::remove_all(dir);
  }
}

// The tolerances above are arguments, not what one CPU happened to give: each variant of ggml this CPU can
// execute (x64 without vectors up to this CPU's best) computes with other kernels, and both sides must agree
// within the same bounds on each.
TEST_CASE("Quantized and f16 GGUF files match llama.cpp under every ggml CPU variant this host runs") {
  const auto variants = runnable_variants();
  REQUIRE(variants.size() >= 2);  // at least x64 and sse42 on any x86-64
  const fs::path root = fs::temp_directory_path() / ("epd-variants-" + std::to_string(::getpid()));
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(len > 0);
  self[len] = 0;
  for (const std::string& v : variants) {
    const fs::path tree = oracle_tree_for(v, root);
    const std::string cmd = "EPD_GGML_CPU=" + v + " EPD_ORACLE_NODE_DIR=" + tree.string() + " " + self +
                            " '[.variant]' > " + (root / (v + ".log")).string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    std::ifstream log(root / (v + ".log"));
    const std::string text{std::istreambuf_iterator<char>(log), {}};
    INFO("variant " << v << ":\n" << text);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    for (size_t at = 0; (at = text.find(v + ", ", at)) != std::string::npos; ++at)
      std::printf("%s\n", text.substr(at, text.find('\n', at) - at).c_str());
  }
  fs::remove_all(root);
}
