// ggml's repacked weights (model/src/kernels/ggml/packed_weights.hpp): written once per host into the cache
// directory, mapped by every later load, rebuilt when damaged or stale, private memory when no directory
// can be used, and the same logits whichever way they were obtained.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "epd/model/llama.hpp"
#include "helpers.hpp"
#include "llama_checkpoint.hpp"
#include "llama_run.hpp"

namespace {

namespace fs = std::filesystem;
using namespace epd::model;
using epd::model::test::load;
using epd::model::test::prompt_ids;
using epd::model::test::Run;
using epd::model::test::run;
using epd::model::test::TempDir;

// Q4_K rows of whole super-blocks and a multiple of 8 of them: ggml repacks these on any AVX2 CPU.
testing::CheckpointSpec q4_k_spec() {
  testing::CheckpointSpec s;
  s.d_model = 256;
  s.ffn = 512;
  s.heads = 4;
  s.kv_heads = 2;
  s.gguf_file_type = "q4_k_m";
  return s;
}

// Points the cache at `dir` for the life of the object.
struct CacheDir {
  explicit CacheDir(const std::string& dir) { ::setenv("EPD_CACHE_DIR", dir.c_str(), 1); }
  ~CacheDir() { ::unsetenv("EPD_CACHE_DIR"); }
};

std::vector<fs::path> packed_files(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".bin") out.push_back(e.path());
  return out;
}

}  // namespace

TEST_CASE(
    "packed weights: written once into the cache and then mapped, rebuilt when damaged, pruned when their "
    "model is gone") {
  TempDir model_dir, cache;
  auto paths = testing::write_llama_checkpoint(q4_k_spec(), model_dir.path);
  REQUIRE(paths.ok());
  CacheDir env(cache.path);
  const auto prompt = prompt_ids(20, 384);

  auto first = load(paths->gguf);
  INFO(first->kernels());
  REQUIRE(first->kernels().find("repacked (q4_K_8x") != std::string::npos);
  const auto files = packed_files(cache.path);
  REQUIRE(files.size() == 1);
  CHECK(first->kernels().find(files[0].string()) != std::string::npos);
  const Run want = run(*first, prompt, 8);
  const auto written = fs::last_write_time(files[0]);

  // A second load maps the same file: not written again, same bits.
  auto second = load(paths->gguf);
  CHECK(fs::last_write_time(files[0]) == written);
  CHECK(packed_files(cache.path).size() == 1);
  const Run again = run(*second, prompt, 8);
  CHECK(again.logits == want.logits);
  CHECK(again.tokens == want.tokens);

  // A flipped byte in the repacked data fails the checksum: the file is rebuilt, the model is unchanged.
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-100, std::ios::end);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  auto repaired = load(paths->gguf);
  CHECK(run(*repaired, prompt, 8).logits == want.logits);
  CHECK(packed_files(cache.path).size() == 1);

  // Another model file (a changed one: new size and time) gets a file of its own.
  TempDir other_dir;
  auto spec = q4_k_spec();
  spec.seed = 99;
  auto other = testing::write_llama_checkpoint(spec, other_dir.path);
  REQUIRE(other.ok());
  auto third = load(other->gguf);
  CHECK(packed_files(cache.path).size() == 2);
  CHECK(run(*third, prompt, 8).logits != want.logits);

  // Once the first model file is gone, the next file written prunes its entry.
  first.reset();
  second.reset();
  repaired.reset();
  fs::remove_all(model_dir.path);
  TempDir last_dir;
  spec.seed = 100;
  auto last = testing::write_llama_checkpoint(spec, last_dir.path);
  REQUIRE(last.ok());
  auto fourth = load(last->gguf);
  CHECK_FALSE(fs::exists(files[0]));
  CHECK(packed_files(cache.path).size() == 2);
}

TEST_CASE("packed weights: without a usable cache directory they live in private memory, same bits") {
  TempDir model_dir, cache;
  auto paths = testing::write_llama_checkpoint(q4_k_spec(), model_dir.path);
  REQUIRE(paths.ok());
  const auto prompt = prompt_ids(20, 384);
  Run shared;
  {
    CacheDir env(cache.path);
    shared = run(*load(paths->gguf), prompt, 8);
  }
  // A regular file where the directory should be: it cannot be created, nothing is written anywhere.
  const fs::path blocked = fs::path(cache.path) / "not-a-dir";
  std::ofstream(blocked) << "x";
  CacheDir env(blocked.string() + "/cache");
  auto r = load(paths->gguf);
  INFO(r->kernels());
  CHECK(r->kernels().find("private memory") != std::string::npos);
  const Run got = run(*r, prompt, 8);
  CHECK(got.logits == shared.logits);
  CHECK(got.tokens == shared.tokens);
}

TEST_CASE(
    "packed weights: EPD_GGML_REPACK=0 multiplies the file's own layout, within rounding of the packed") {
  TempDir model_dir, cache;
  auto paths = testing::write_llama_checkpoint(q4_k_spec(), model_dir.path);
  REQUIRE(paths.ok());
  CacheDir env(cache.path);
  const auto prompt = prompt_ids(20, 384);
  const Run packed = run(*load(paths->gguf), prompt, 8);
  ::setenv("EPD_GGML_REPACK", "0", 1);
  auto plain = load(paths->gguf);
  ::unsetenv("EPD_GGML_REPACK");
  INFO(plain->kernels());
  CHECK(plain->kernels().find(" 0 of ") != std::string::npos);
  const Run got = run(*plain, prompt, 8);
  // Other kernels (vec_dot against GEMM/GEMV), the same weights: close, not equal bits.
  double top = 0, worst = 0;
  for (float v : packed.logits) top = std::max(top, double{std::fabs(v)});
  for (size_t i = 0; i < got.logits.size(); ++i)
    worst = std::max(worst, std::fabs(double{got.logits[i]} - packed.logits[i]));
  CHECK(worst / top < 1e-2);
  CHECK(got.tokens == packed.tokens);
}
