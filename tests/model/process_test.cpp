// Determinism across processes: epd-run (a separate process) must produce exactly the tokens and the KV
// digest that this process computes.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "epd/model/generate.hpp"
#include "helpers.hpp"

using namespace epd::model;

namespace {

struct Child {
  int status;
  std::string out;
};

Child run(const std::string& args) {
  const std::string cmd = std::string(EPD_RUN_PATH) + " " + args + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// The JSON without its timings (which differ run to run).
std::string stable_part(const std::string& json) {
  return json.substr(0, json.find(",\"timings_ms\""));
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("epd_model_test_" + std::to_string(getpid()) + name))
      .string();
}

}  // namespace

TEST_CASE("epd-run in two processes gives identical tokens and KV, equal to in-process", "[model][process]") {
  const Image img = make_test_image(32, 24, 11);
  const std::string ppm = temp_path(".ppm");
  REQUIRE(write_ppm_file(ppm, img).ok());
  const std::string text = "Two processes, one answer.";
  const std::string args = "--preset tiny --json --max-tokens 16 --prompt '" + text + "' --image " + ppm;

  const Child a = run(args), b = run(args), c = run(args + " --chunk 7");
  std::filesystem::remove(ppm);
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  REQUIRE(c.status == 0);
  CHECK(stable_part(a.out) == stable_part(b.out));
  CHECK(stable_part(a.out) == stable_part(c.out));

  auto r = test::runner_for("tiny");
  GenerateOptions opts;
  opts.max_tokens = 16;
  opts.stop_at_eos = true;
  auto mine = generate(*r, text, &img, opts);
  REQUIRE(mine.ok());
  CHECK(mine->tokens.size() == 16);
  CHECK(stable_part(a.out) == stable_part(to_json(*mine)));
  CHECK(a.out.rfind("{\"tokens\":[", 0) == 0);
}

TEST_CASE("epd-run --decode-* flags run the staged path, equal to in-process generate", "[model][process]") {
  const std::string text = "Decode elsewhere.";
  const Child f16 = run("--preset tiny --json --max-tokens 12 --prompt '" + text +
                        "' --decode-page-size 64 --decode-kv-dtype f16 --decode-kv-order head_token_dim");
  REQUIRE(f16.status == 0);
  auto r = test::runner_for("tiny");
  GenerateOptions opts;
  opts.max_tokens = 12;
  opts.decode_kv = KvLayoutChoice{64, DType::f16, KvDimOrder::head_token_dim};
  auto mine = generate(*r, text, nullptr, opts);
  REQUIRE(mine.ok());
  CHECK(stable_part(f16.out) == stable_part(to_json(*mine)));
  // Only the dtype given: page size and order keep their defaults.
  const Child bf16 =
      run("--preset tiny --json --max-tokens 12 --prompt '" + text + "' --decode-kv-dtype bf16");
  REQUIRE(bf16.status == 0);
  opts.decode_kv = KvLayoutChoice{0, DType::bf16, KvDimOrder::token_head_dim};
  auto mine_bf16 = generate(*r, text, nullptr, opts);
  REQUIRE(mine_bf16.ok());
  CHECK(stable_part(bf16.out) == stable_part(to_json(*mine_bf16)));

  CHECK(run("--prompt x --decode-kv-dtype f8").status != 0);
  CHECK(run("--prompt x --decode-kv-order token_dim").status != 0);
  CHECK(run("--prompt x --decode-page-size 0").status != 0);
  CHECK(run("--prompt x --decode-page-size 4097").status != 0);
}

TEST_CASE("epd-run fails clearly on bad input", "[model][process]") {
  CHECK(run("--prompt x --image /nonexistent.ppm").status != 0);
  CHECK(run("--prompt x --model /nonexistent.toml").status != 0);
  CHECK(run("--prompt x --preset nope").status != 0);
  const std::string bad = temp_path("_bad.ppm");
  {
    FILE* f = std::fopen(bad.c_str(), "wb");
    REQUIRE(f);
    std::fputs("P6\n4294967295 4294967295\n255\n", f);
    std::fclose(f);
  }
  CHECK(run("--prompt x --image " + bad).status != 0);
  std::filesystem::remove(bad);
}
