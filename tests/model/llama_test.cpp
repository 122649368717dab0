// The Llama-family runner on generated checkpoints: the Hugging Face directory and the GGUF file load to the
// same model (bit-identical logits), batched decode equals decoding alone, threads do not change results,
// and malformed checkpoints give errors that name the problem.
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "epd/model/generate.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/prompt_codec.hpp"
#include "gguf_writer.hpp"
#include "helpers.hpp"
#include "llama_checkpoint.hpp"
#include "llama_run.hpp"

namespace {

namespace fs = std::filesystem;
using namespace epd::model;
using epd::model::testing::CheckpointSpec;
using epd::model::testing::write_llama_checkpoint;

using epd::model::test::load;
using epd::model::test::prompt_ids;
using epd::model::test::Run;
using epd::model::test::run;
using epd::model::test::TempDir;

}  // namespace

TEST_CASE("Llama checkpoint config comes from config.json and from GGUF metadata alike") {
  TempDir dir;
  CheckpointSpec spec;
  auto paths = write_llama_checkpoint(spec, dir.path);
  REQUIRE(paths.ok());
  for (const std::string& p : {paths->hf_dir, paths->gguf}) {
    INFO(p);
    CHECK(is_checkpoint_path(p));
    auto c = read_checkpoint_config(p);
    REQUIRE(c.ok());
    CHECK(c->vocab == spec.vocab);
    CHECK(c->d_model == 64);
    CHECK(c->layers == 2);
    CHECK(c->heads == 4);
    CHECK(c->kv_heads == 2);
    CHECK(c->head_dim == 16);
    CHECK(c->ffn == 192);
    CHECK(c->max_seq == 512);
    CHECK(c->rope_theta == 10000.0f);
    CHECK(c->norm_eps == 1e-5f);
    CHECK(c->checkpoint == p);
  }
  CHECK_FALSE(is_checkpoint_path((dir.path / "model.toml").string()));
}

TEST_CASE("Llama safetensors directory and GGUF file compute bit-identical logits") {
  TempDir dir;
  for (bool tied : {false, true}) {
    CheckpointSpec spec;
    spec.tied = tied;
    auto paths = write_llama_checkpoint(spec, dir.path / (tied ? "tied" : "untied"));
    REQUIRE(paths.ok());
    auto hf = load(paths->hf_dir), gg = load(paths->gguf);
    const auto prompt = prompt_ids(40, spec.vocab);
    const Run a = run(*hf, prompt, 12), b = run(*gg, prompt, 12);
    CHECK(a.logits.size() == 40 * spec.vocab);
    CHECK(a.logits == b.logits);
    CHECK(a.tokens == b.tokens);
    CHECK(a.digest == b.digest);
    // Not a degenerate model: the logits spread and (untied: a random tied head favours repeating the input)
    // the greedy tokens vary.
    if (!tied) CHECK(std::set<TokenId>(a.tokens.begin(), a.tokens.end()).size() > 3);
    const auto [lo, hi] = std::minmax_element(a.logits.begin(), a.logits.end());
    CHECK(*hi - *lo > 5.0f);
  }
}

TEST_CASE("Llama single-file and single-shard checkpoints load too") {
  TempDir dir;
  CheckpointSpec spec;
  spec.shards = 1;
  spec.mixed_dtypes = false;
  auto paths = write_llama_checkpoint(spec, dir.path);
  REQUIRE(paths.ok());
  auto dir_runner = load(paths->hf_dir);
  auto file_runner = load(paths->hf_dir + "/model.safetensors");
  const auto prompt = prompt_ids(20, spec.vocab);
  CHECK(run(*dir_runner, prompt, 4).logits == run(*file_runner, prompt, 4).logits);
}

TEST_CASE("Llama batched decode equals decoding each sequence alone and threads change nothing") {
  TempDir dir;
  CheckpointSpec spec;
  auto paths = write_llama_checkpoint(spec, dir.path);
  REQUIRE(paths.ok());
  auto one = load(paths->gguf, 1), two = load(paths->gguf, 2);
  const ModelConfig& cfg = one->config();
  constexpr uint32_t kSeqs = 5, kPages = 8, kSteps = 10;
  // Each sequence alone, in its own pool.
  std::vector<std::vector<TokenId>> alone(kSeqs);
  std::vector<uint64_t> alone_digest(kSeqs);
  for (uint32_t s = 0; s < kSeqs; ++s) {
    const Run r = run(*one, prompt_ids(10 + 7 * s, spec.vocab, s), kSteps);
    alone[s] = r.tokens;
    alone_digest[s] = r.digest;
  }
  for (LlamaRunner* r : {one.get(), two.get()}) {
    epd::model::test::TestPool pool(cfg, kSeqs * kPages);
    std::vector<std::vector<PageId>> pages(kSeqs);
    std::vector<std::vector<TokenId>> prompts;
    for (uint32_t s = 0; s < kSeqs; ++s) {
      for (uint32_t p = 0; p < kPages; ++p) pages[s].push_back((kSeqs - 1 - s) * kPages + p);  // shuffled
      prompts.push_back(prompt_ids(10 + 7 * s, spec.vocab, s));
    }
    std::vector<DecodeSeq> seqs;
    const auto got = epd::model::test::decode_together(*r, pool.pool, pages, prompts, kSteps, seqs);
    for (uint32_t s = 0; s < kSeqs; ++s) {
      CHECK(got[s] == alone[s]);
      CHECK(kv_digest(pool.pool, std::span(pages[s]).first(pages_for(pool.pool.layout, seqs[s].length))) ==
            alone_digest[s]);
    }
  }
}

TEST_CASE("Llama chunked prefill repeats itself and stays close to one-shot prefill") {
  TempDir dir;
  auto paths = write_llama_checkpoint(CheckpointSpec{}, dir.path);
  REQUIRE(paths.ok());
  auto a = load(paths->hf_dir, 2), b = load(paths->hf_dir, 1);
  const auto prompt = prompt_ids(50, 384);
  const Run whole = run(*a, prompt, 8), chunked1 = run(*a, prompt, 8, 7), chunked2 = run(*b, prompt, 8, 7);
  // Same chunking: the same bits, whatever the thread count.
  CHECK(chunked1.logits == chunked2.logits);
  CHECK(chunked1.digest == chunked2.digest);
  CHECK(chunked1.tokens == chunked2.tokens);
  // Another chunking runs sgemm on other shapes: equal up to rounding.
  REQUIRE(whole.logits.size() == chunked1.logits.size());
  for (size_t i = 0; i < whole.logits.size(); ++i)
    REQUIRE(whole.logits[i] == Approx(chunked1.logits[i]).margin(1e-4));
  CHECK(whole.tokens == chunked1.tokens);
}

TEST_CASE("Llama over f16 and bf16 KV pools stays within their rounding of f32 and decodes the same tokens") {
  TempDir dir;
  CheckpointSpec spec;
  spec.layers = 4;
  auto paths = write_llama_checkpoint(spec, dir.path);
  REQUIRE(paths.ok());
  auto r = load(paths->gguf, 2);
  REQUIRE(r->config().head_dim % 16 == 0);  // the vectorised conversion (kernels/half_vec.hpp) runs
  const auto prompt = prompt_ids(120, spec.vocab);
  const Run f32 = run(*r, prompt, 12, 0, DType::f32);
  float top = 0.0f;
  for (float v : f32.logits) top = std::max(top, std::fabs(v));
  // A stored element is off by at most its unit roundoff (f16 2^-11, bf16 2^-8, relative); a score, a
  // softmax weight and a weighted value each carry a few such errors, and 4 layers add theirs: 16 unit
  // roundoffs of the largest logit bound it with room. A wrong conversion (a bias off by one, a lost
  // mantissa bit) is off by a factor, far outside.
  for (auto [dt, unit] : {std::pair{DType::f16, 0x1p-11f}, std::pair{DType::bf16, 0x1p-8f}}) {
    const Run got = run(*r, prompt, 12, 0, dt);
    REQUIRE(got.logits.size() == f32.logits.size());
    float worst = 0.0f;
    for (size_t i = 0; i < got.logits.size(); ++i)
      worst = std::max(worst, std::fabs(got.logits[i] - f32.logits[i]));
    INFO("dtype " << dtype_name(dt) << ": largest logit difference " << worst << " of " << top);
    CHECK(worst > 0.0f);  // the pool really held rounded values
    CHECK(worst <= 16 * unit * top);
    if (dt == DType::f16) CHECK(got.tokens == f32.tokens);
  }
}

TEST_CASE("Llama runner is text-only and validates its inputs") {
  TempDir dir;
  auto paths = write_llama_checkpoint(CheckpointSpec{}, dir.path);
  REQUIRE(paths.ok());
  auto r = load(paths->gguf);
  auto e = r->encode(make_test_image(8, 8, 1));
  REQUIRE_FALSE(e.ok());
  CHECK_THAT(e.error().detail, Catch::Contains("text-only"));
  epd::model::test::TestPool pool(r->config(), 4);
  std::vector<PageId> pages{0, 1, 2, 3};
  const std::vector<TokenId> bad{1, 384};
  auto t = r->prefill_chunk(pool.pool, pages, 0, PrefillChunk{bad, {}});
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.error().detail, Catch::Contains("outside vocab"));
  const std::vector<TokenId> ok{1, 258, 256};  // the byte vocabulary's IMAGE/BOS ids are ordinary tokens here
  CHECK(r->prefill_chunk(pool.pool, pages, 0, PrefillChunk{ok, {}}).ok());
  const std::vector<float> emb(64, 0.0f);
  CHECK_FALSE(r->prefill_chunk(pool.pool, pages, 0, PrefillChunk{ok, emb}).ok());
}

TEST_CASE("Llama checkpoints with missing or malformed parts give named errors") {
  TempDir dir;
  CheckpointSpec spec;
  auto paths = write_llama_checkpoint(spec, dir.path);
  REQUIRE(paths.ok());
  auto err = [](const std::string& path) {
    auto cfg = read_checkpoint_config(path);
    if (!cfg) return cfg.error().detail;
    auto r = make_llama_runner(*cfg);
    REQUIRE_FALSE(r.ok());
    return r.error().detail;
  };
  auto edit_config = [&](const fs::path& d, auto fn) {
    fs::copy(paths->hf_dir, d, fs::copy_options::recursive);
    nlohmann::json j = nlohmann::json::parse(std::ifstream(d / "config.json"));
    fn(j);
    std::ofstream(d / "config.json") << j.dump();
  };
  edit_config(dir.path / "typed", [](auto& j) { j["rms_norm_eps"] = "small"; });
  CHECK_THAT(err((dir.path / "typed").string()), Catch::Contains("rms_norm_eps must be a number"));
  edit_config(dir.path / "typeless", [](auto& j) { j["model_type"] = 7; });
  CHECK_THAT(err((dir.path / "typeless").string()), Catch::Contains("unsupported architecture"));
  edit_config(dir.path / "qwen", [](auto& j) { j["model_type"] = "qwen2"; });
  CHECK_THAT(err((dir.path / "qwen").string()), Catch::Contains("unsupported architecture 'qwen2'"));
  edit_config(dir.path / "scaled", [](auto& j) { j["rope_scaling"] = {{"rope_type", "llama3"}}; });
  CHECK_THAT(err((dir.path / "scaled").string()), Catch::Contains("rope_scaling"));
  edit_config(dir.path / "wide", [](auto& j) { j["intermediate_size"] = 200; });
  CHECK_THAT(err((dir.path / "wide").string()),
             Catch::Contains("mlp.gate_proj.weight has shape [192, 64], expected [200, 64]"));
  edit_config(dir.path / "deep", [](auto& j) { j["num_hidden_layers"] = 3; });
  CHECK_THAT(err((dir.path / "deep").string()), Catch::Contains("missing tensor model.layers.2."));
  edit_config(dir.path / "untied", [](auto&) {});
  {
    // The index names a tensor its shard does not hold.
    nlohmann::json idx =
        nlohmann::json::parse(std::ifstream(dir.path / "untied/model.safetensors.index.json"));
    REQUIRE(idx["weight_map"]["model.norm.weight"] == "model-00002-of-00002.safetensors");
    idx["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
    std::ofstream(dir.path / "untied/model.safetensors.index.json") << idx.dump();
  }
  CHECK_THAT(err((dir.path / "untied").string()),
             Catch::Contains("listed by the index is not in this shard"));
  // A truncated shard.
  fs::copy(paths->hf_dir, dir.path / "cut", fs::copy_options::recursive);
  const fs::path shard = dir.path / "cut/model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  CHECK_THAT(err((dir.path / "cut").string()), Catch::Contains("truncated"));
  // A truncated GGUF.
  fs::copy(paths->gguf, dir.path / "cut.gguf");
  fs::resize_file(dir.path / "cut.gguf", fs::file_size(paths->gguf) / 2);
  CHECK_THAT(err((dir.path / "cut.gguf").string()), Catch::Contains("truncated"));
  // Another GGUF architecture.
  {
    epd::model::testing::GgufWriter w;
    w.set_string("general.architecture", "rwkv7");
    REQUIRE(w.write((dir.path / "rwkv.gguf").string()).ok());
  }
  CHECK_THAT(err((dir.path / "rwkv.gguf").string()), Catch::Contains("unsupported architecture 'rwkv7'"));
  CHECK_THAT(err((dir.path / "nothing").string()), Catch::Contains("cannot open"));
}

TEST_CASE("epd-run serves a checkpoint by token ids and by text as the in-process runner does") {
  TempDir dir;
  auto paths = write_llama_checkpoint(CheckpointSpec{}, dir.path);
  REQUIRE(paths.ok());
  const auto prompt = prompt_ids(30, 384);
  std::string ids;
  for (TokenId t : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  auto child = [](const std::string& args) {
    FILE* f = ::popen((std::string(EPD_RUN_PATH) + " " + args + " 2>&1").c_str(), "r");
    REQUIRE(f);
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    const int st = ::pclose(f);
    return std::make_pair(WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
  };
  // The GGUF carries a tokenizer: its end tokens stop epd-run as they stop the cluster.
  auto codec = PromptCodec::for_model(*load_model_path(paths->gguf));
  REQUIRE(codec.ok());
  const std::vector<TokenId> stops((*codec)->stop_tokens().begin(), (*codec)->stop_tokens().end());
  for (const std::string& path : {paths->hf_dir, paths->gguf}) {
    auto r = load(path);
    GenerateOptions opts;
    opts.max_tokens = 12;
    opts.chunk = 8;
    if (path == paths->gguf) opts.stop_tokens = stops;
    auto want = generate_tokens(*r, prompt, opts);
    REQUIRE(want.ok());
    const auto [status, out] = child("--model " + path + " --prompt-tokens " + ids +
                                     " --max-tokens 12 --chunk 8 --threads 2 --json");
    INFO(out);
    REQUIRE(status == 0);
    const auto j = nlohmann::json::parse(out);
    CHECK(j["tokens"].get<std::vector<TokenId>>() == want->tokens);
    char digest[17];
    std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(want->kv_digest));
    CHECK(j["kv_digest"] == digest);
    CHECK(j["prompt_tokens"] == 30);
  }
  const auto bad_id = child("--model " + paths->gguf + " --prompt-tokens 1,384");
  CHECK(bad_id.first == 2);
  CHECK_THAT(bad_id.second, Catch::Contains("not a token id below 384"));
  // Text goes through the checkpoint's tokenizer; the HF directory has none, so it takes only ids.
  const auto text = child("--model " + paths->gguf + " --prompt 'w300 w301 hello' --max-tokens 12 --json");
  INFO(text.second);
  REQUIRE(text.first == 0);
  GenerateOptions opts;
  opts.max_tokens = 12;
  opts.stop_tokens = stops;
  auto r = load(paths->gguf);
  auto want = generate_tokens(*r, *(*codec)->prompt("w300 w301 hello", {}), opts);
  REQUIRE(want.ok());
  CHECK(nlohmann::json::parse(text.second)["tokens"].get<std::vector<TokenId>>() == want->tokens);
  const auto no_tokenizer = child("--model " + paths->hf_dir + " --prompt hello");
  CHECK(no_tokenizer.first == 2);
  CHECK_THAT(no_tokenizer.second, Catch::Contains("no tokenizer.model or tokenizer.json"));
}

TEST_CASE("a checkpoint runner's prefill uses the CPU's vector kernels of OpenBLAS") {
  TempDir dir;
  auto paths = write_llama_checkpoint(CheckpointSpec{}, dir.path);
  REQUIRE(paths.ok());
  auto r = load(paths->gguf);  // the runner selects the core before its first sgemm
  const std::string core = prefill_blas_core();
  INFO("OpenBLAS core " << core);
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  // Never the generic SSE3 kernels on a CPU with AVX2 (unless the user forced them).
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && avx2) CHECK(core != "Prescott");
  CHECK_FALSE(core.empty());
}
