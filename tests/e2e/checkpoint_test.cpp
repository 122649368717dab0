// A Llama-family checkpoint served by the disaggregated cluster (router, encoder, prefill, decode as
// processes), driven by token ids through POST /v1/generate: every answer equals the colocated run
// (generate_tokens, the code epd-run uses) with the same chunking, though prefill computes the rooms' chunks
// in shared passes — over shm, over tcp, and with decode
// holding its KV in fp16 (the staged path; the reference then decodes from an fp16 copy of the prompt's KV),
// for an f32 GGUF, a Hugging Face directory and GGUF files in F16, Q8_0, Q4_0 and Q4_K_M (made by
// llama.cpp's quantizer, run on ggml's kernels). For the quantized files the colocated answers are also
// llama.cpp's own greedy continuation of the same ids (node-llama-cpp on the same file): the three agree.
#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <future>

#include "cluster.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/prompt_codec.hpp"
#include "llama_checkpoint.hpp"
#include "openai_support.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;

namespace {

constexpr uint32_t kChunk = 64;  // the prefill role's default chunk_tokens

// The default random checkpoint (f32 GGUF and a Hugging Face directory), or, with a file type, a GGUF of
// hidden 256 quantized by llama.cpp's quantizer (Q4_K_M: Q4_K and Q6_K matrices, run on ggml's kernels).
struct Checkpoint {
  explicit Checkpoint(const std::string& gguf_file_type = "f32", model::testing::CheckpointSpec s = {}) {
    dir = std::filesystem::temp_directory_path() /
          ("epd-e2e-ckpt-" + std::to_string(::getpid()) + "-" + s.arch + "-" + gguf_file_type);
    if (gguf_file_type != "f32") {
      s.d_model = 256;
      s.ffn = 512;
      s.gguf_file_type = gguf_file_type;
    }
    auto p = model::testing::write_llama_checkpoint(s, dir);
    REQUIRE(p.ok());
    paths = *p;
  }
  ~Checkpoint() { std::filesystem::remove_all(dir); }
  std::filesystem::path dir;
  model::testing::CheckpointPaths paths;
};

std::vector<uint32_t> prompt_of(int i) {
  std::vector<uint32_t> p(20 + 37 * i);  // 20..131 tokens: one to three chunks
  for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<uint32_t>((k * 53 + i * 101 + 3) % 384);
  return p;
}

// The colocated run in KV of `dtype` (the roles' default, f16, unless a test says otherwise).
std::vector<uint32_t> colocated(const std::string& path, const std::vector<uint32_t>& prompt,
                                const std::optional<model::KvLayoutChoice>& decode_kv,
                                model::DType dtype = model::DType::f16) {
  auto cfg = model::load_model_path(path);
  REQUIRE(cfg.ok());
  auto runner = model::make_runner(*cfg);
  REQUIRE(runner.ok());
  model::GenerateOptions opts;
  opts.max_tokens = 12;
  opts.chunk = kChunk;
  opts.decode_kv = decode_kv;
  opts.dtype = dtype;
  // The GGUF's vocabulary has an EOS, which ends the answer as in the cluster; the HF directory has none.
  if (auto codec = model::PromptCodec::for_model(*cfg))
    opts.stop_tokens.assign((*codec)->stop_tokens().begin(), (*codec)->stop_tokens().end());
  auto r = model::generate_tokens(**runner, prompt, opts);
  REQUIRE(r.ok());
  return r->tokens;
}

// The colocated answers to the cluster's prompts are llama.cpp's greedy tokens too (up to an end token,
// where epd stops and llama.cpp's oracle goes on). With `tolerance` (the logit gap the model oracle test
// allows the file's type, relative to the largest logit), the two may part where llama.cpp's own best token
// leads its runner-up by less than twice that gap: a near-tie either side may take (llama.cpp evaluates the
// prompt in one batch, epd in chunks of 64, and quantized activations round differently); the texts differ
// from there on. 0: no fork allowed.
void check_against_llama_cpp(const Checkpoint& ck, double tolerance = 0) {
  for (int i = 0; i < 4; ++i) {
    // llama_oracle.mjs holds llama.cpp's KV in f32: the comparison is of the model's arithmetic, with no
    // KV rounding on either side (f16 KV against f32 is bounded in tests/model/llama_test.cpp).
    const auto ours = colocated(ck.paths.gguf, prompt_of(i), std::nullopt, model::DType::f32);
    const auto theirs = llama_cpp_greedy_with_leads(ck.paths.gguf, ck.dir.string(), prompt_of(i), 12);
    INFO("case " << i);
    REQUIRE(theirs.tokens.size() >= ours.size());
    size_t same = 0;
    while (same < ours.size() && ours[same] == theirs.tokens[same]) ++same;
    if (same == ours.size()) continue;
    INFO("fork at " << same << ": epd " << ours[same] << ", llama.cpp " << theirs.tokens[same]
                    << ", llama.cpp's lead " << theirs.lead[same] << " of " << theirs.largest[same]);
    CHECK(theirs.lead[same] <= 2 * tolerance * theirs.largest[same]);
  }
}

// A role's counters of its compute `calls` (prefill passes, decode steps) and the `rooms` they took:
// more rooms than calls, so some call took several.
void check_batched(const std::string& scrape, const std::string& calls, const std::string& rooms) {
  const double n_calls = metric_sum(scrape, calls), n_rooms = metric_sum(scrape, rooms);
  INFO(calls << " " << n_calls << ", " << rooms << " " << n_rooms);
  CHECK(n_calls > 0);
  CHECK(n_rooms > n_calls);
}

void serve_and_compare(const std::string& model_path, const std::string& backend,
                       const std::string& decode_lines,
                       const std::optional<model::KvLayoutChoice>& decode_kv) {
  ClusterSpec spec;
  spec.model_path = model_path;
  spec.backend = backend;
  spec.metrics = true;
  // Every prefill pass waits a while first, so rooms that arrive together are computed together; decode
  // pauses between steps, so rooms that reach it together are decoded together.
  spec.defaults["prefill"] = "chunk_delay_ms = 150\n";
  spec.defaults["decode"] = "step_delay_ms = 30\n" + decode_lines;
  Cluster cluster(spec);
  cluster.start();
  constexpr int kCases = 4;
  std::vector<std::future<std::pair<int, json>>> answers;
  for (int i = 0; i < kCases; ++i)  // in flight together: prefill's passes and decode's steps batch them
    answers.push_back(std::async(std::launch::async, [&, i] {
      return cluster.generate({{"prompt_tokens", prompt_of(i)}, {"max_tokens", 12}});
    }));
  for (int i = 0; i < kCases; ++i) {
    const auto [status, body] = answers[i].get();
    INFO("case " << i << ": " << body.dump() << "\n" << cluster.logs());
    REQUIRE(status == 200);
    CHECK(body["tokens"].get<std::vector<uint32_t>>() == colocated(model_path, prompt_of(i), decode_kv));
  }
  // ... and some of those chunks were computed in one pass with another room's, and some decode steps
  // advanced several rooms.
  check_batched(cluster.scrape("prefill-0"), "epd_prefill_passes_total", "epd_prefill_pass_chunks_total");
  check_batched(cluster.scrape("decode-0"), "epd_decode_steps_total", "epd_decode_step_sequences_total");
  // Text needs the checkpoint's tokenizer: the GGUF has one, the HF directory (no tokenizer files) is
  // served by token ids only. An id outside the vocabulary is refused.
  const bool has_tokenizer = model::PromptCodec::for_model(*model::load_model_path(model_path)).ok();
  const auto [text_status, text_body] = cluster.generate({{"prompt", "hello"}});
  INFO(text_body.dump());
  CHECK(text_status == (has_tokenizer ? 200 : 400));
  if (!has_tokenizer)
    CHECK_THAT(text_body["error"]["message"].get<std::string>(),
               Catch::Contains("takes only \"prompt_tokens\"") && Catch::Contains("no tokenizer.model"));
  const auto [id_status, id_body] = cluster.generate({{"prompt_tokens", {1, 384}}});
  CHECK(id_status == 400);
  CHECK_THAT(id_body.dump(), Catch::Contains("outside the vocabulary of 384"));
  cluster.wait_all_free();
  const std::string reports = cluster.stop_and_collect_sanitizer_reports();
  INFO(reports);
  CHECK(reports.empty());
}

}  // namespace

TEST_CASE("checkpoint cluster over shm equals the colocated run from GGUF and safetensors") {
  Checkpoint ck;
  serve_and_compare(ck.paths.gguf, "shm", "", std::nullopt);
  serve_and_compare(ck.paths.hf_dir, "shm", "", std::nullopt);
}

TEST_CASE("checkpoint cluster over tcp equals the colocated run") {
  Checkpoint ck;
  serve_and_compare(ck.paths.gguf, "tcp", "", std::nullopt);
}

TEST_CASE("Q4_K_M checkpoint cluster over shm and tcp equals the colocated run and llama.cpp") {
  Checkpoint ck("q4_k_m");
  check_against_llama_cpp(ck);
  serve_and_compare(ck.paths.gguf, "shm", "", std::nullopt);
  serve_and_compare(ck.paths.gguf, "tcp", "", std::nullopt);
}

TEST_CASE("Q8_0 and Q4_0 checkpoint clusters over shm and tcp equal the colocated run and llama.cpp") {
  for (const char* type : {"q8_0", "q4_0"}) {
    INFO(type);
    Checkpoint ck(type);
    check_against_llama_cpp(ck);
    serve_and_compare(ck.paths.gguf, "shm", "", std::nullopt);
    serve_and_compare(ck.paths.gguf, "tcp", "", std::nullopt);
  }
}

TEST_CASE("F16 checkpoint cluster over shm equals the colocated run and llama.cpp") {
  Checkpoint ck("f16");
  check_against_llama_cpp(ck);
  serve_and_compare(ck.paths.gguf, "shm", "", std::nullopt);
}

TEST_CASE("checkpoint cluster staged into an fp32 decode equals the staged colocated run") {
  const std::string lines = "kv_dtype = \"f32\"\nkv_page_size = 32\n";
  const model::KvLayoutChoice kv{32, model::DType::f32, model::KvDimOrder::token_head_dim};
  Checkpoint ck, quantized("q4_k_m");
  serve_and_compare(ck.paths.gguf, "shm", lines, kv);
  serve_and_compare(quantized.paths.gguf, "shm", lines, kv);
}

// Each family beyond Llama's blocks, through the cluster: Llama 3's frequency factors with biases, Qwen2's
// biases and NEOX rotation, Qwen3's QK-norm, Qwen3-MoE's routed experts, Gemma 3's sliding window of 16
// positions (every prompt here crosses it, and the 64-token chunks split it), Phi-3's fused matrices and
// LongRoPE. Every answer equals the colocated run, which equals llama.cpp's greedy tokens on the same file;
// over shm for every family, over tcp and staged into an fp16 decode for three.
TEST_CASE("each checkpoint family served by the cluster equals the colocated run and llama.cpp") {
  auto spec = [](const char* arch) {
    model::testing::CheckpointSpec s;
    s.arch = arch;
    s.write_hf = false;
    s.mixed_dtypes = false;
    return s;
  };
  auto llama3 = spec("llama");
  llama3.rope_freqs = llama3.qkv_bias = llama3.out_bias = true;
  auto qwen3 = spec("qwen3");
  qwen3.head_dim = 64;
  auto gemma3 = spec("gemma3");
  gemma3.head_dim = 32;
  gemma3.sliding_window = 16;
  gemma3.swa_pattern = 2;
  gemma3.rope_theta = 1000000.0f;
  gemma3.tied = true;
  auto phi3 = spec("phi3");
  phi3.rope_scaling = "longrope";
  phi3.rope_orig_context = 32;
  phi3.rope_attn_factor = 1.19f;
  phi3.rope_freqs = true;
  auto moe = spec("qwen3moe");  // 2 of 8 experts per row: decode batches rows that chose different ones
  moe.expert_ffn = 256;
  const std::string staged = "kv_dtype = \"f32\"\nkv_page_size = 32\n";
  const model::KvLayoutChoice staged_kv{32, model::DType::f32, model::KvDimOrder::token_head_dim};
  const struct {
    const char* type;
    model::testing::CheckpointSpec spec;
    bool more;  // tcp and staged too
  } cases[] = {{"q4_k_m", llama3, true}, {"q8_0", spec("qwen2"), false}, {"q4_k_m", qwen3, false},
               {"q4_k_m", moe, true},    {"f32", gemma3, true},          {"f32", phi3, false}};
  for (const auto& c : cases) {
    INFO(c.spec.arch << " " << c.type);
    Checkpoint ck(c.type, c.spec);
    check_against_llama_cpp(ck, std::string(c.type) == "f32" ? 1e-4 : 3e-2);
    serve_and_compare(ck.paths.gguf, "shm", "", std::nullopt);
    if (!c.more) continue;
    serve_and_compare(ck.paths.gguf, "tcp", "", std::nullopt);
    serve_and_compare(ck.paths.gguf, "shm", staged, staged_kv);
  }
}

// A checkpoint's K/V bits depend on how its prompt is chunked (ggml's kernels sum in an order that depends
// on a chunk's rows; epd/model/chunk_grid.hpp), so the prefix caches may hand out only K/V computed as the
// colocated run computes it: in whole chunks of the grid from position 0, never a decode step's. Four
// requests one after the other, with log-probabilities, on one prefill and one decode (pages of 16,
// chunks of 64): A (100 tokens); A again; B, which shares A's first 90 tokens and goes on to 150; and the
// chat's next turn C = A + A's answer + 30 more. Every token and every log-probability equals the
// colocated run's bit for bit, and the caches gave exactly what the grid allows: prefill computes from a
// chunk boundary (64 of A's 96 cached tokens, then 64 again), decode holds A's whole first chunk, and for
// C also B's second chunk's first 26 tokens (not A's partial last chunk, nor A's answer).
TEST_CASE(
    "Q4_K_M checkpoint through both prefix caches: every answer and log-probability is the colocated "
    "run's") {
  Checkpoint ck("q4_k_m");
  const std::string path = ck.paths.gguf;
  auto cfg = model::load_model_path(path);
  REQUIRE(cfg.ok());
  REQUIRE(cfg->page_size == 16);
  auto runner = model::make_runner(*cfg);
  REQUIRE(runner.ok());
  auto codec = model::PromptCodec::for_model(*cfg);
  REQUIRE(codec.ok());
  auto colocated_run = [&](const std::vector<uint32_t>& prompt) {
    model::GenerateOptions opts;
    opts.max_tokens = 12;
    opts.chunk = kChunk;
    opts.sampling.logprobs = true;
    opts.stop_tokens.assign((*codec)->stop_tokens().begin(), (*codec)->stop_tokens().end());
    auto r = model::generate_tokens(**runner, prompt, opts);
    REQUIRE(r.ok());
    return *r;
  };
  auto tokens = [](uint32_t n, uint32_t salt) {
    std::vector<uint32_t> p(n);
    for (uint32_t k = 0; k < n; ++k) p[k] = (k * 53 + salt * 101 + 3) % 384;
    return p;
  };
  for (const char* backend : {"shm", "tcp"}) {
    INFO(backend);
    ClusterSpec spec;
    spec.model_path = path;
    spec.backend = backend;
    spec.metrics = true;
    Cluster cluster(spec);
    cluster.start();
    auto ask = [&](const std::vector<uint32_t>& prompt) {
      const auto [status, body] =
          cluster.generate({{"prompt_tokens", prompt}, {"max_tokens", 12}, {"logprobs", 0}});
      INFO(body.dump() << "\n" << cluster.logs());
      REQUIRE(status == 200);
      const auto want = colocated_run(prompt);
      const auto got = body["tokens"].get<std::vector<uint32_t>>();
      CHECK(got == want.tokens);
      REQUIRE(body["logprobs"].size() == want.logprobs.size());
      for (size_t i = 0; i < want.logprobs.size(); ++i) {
        INFO("token " << i);
        CHECK(body["logprobs"][i]["logprob"].get<float>() == want.logprobs[i].logprob);
      }
      return got;
    };
    const auto a = tokens(100, 1);
    auto b = std::vector<uint32_t>(a.begin(), a.begin() + 90);
    for (uint32_t t : tokens(60, 2)) b.push_back(t);
    const auto answer = ask(a);
    ask(a);
    ask(b);
    auto c = a;
    c.insert(c.end(), answer.begin(), answer.end());
    for (uint32_t t : tokens(30, 3)) c.push_back(t);
    ask(c);
    CHECK(metric_sum(cluster.scrape("prefill-0"), "epd_prefix_cache_hit_tokens_total") == 0 + 64 + 64 + 64);
    CHECK(metric_sum(cluster.scrape("decode-0"), "epd_prefix_cache_hit_tokens_total") == 0 + 64 + 64 + 90);
    cluster.wait_all_free();
  }
}
