// Determinism across processes: epd-run (a separate process) must produce exactly the tokens and the KV
// digest that this process computes.
#include <png.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
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

TEST_CASE("epd-run samples like generate() and reads PNG images", "[model][process]") {
  const Image img = make_test_image(24, 16, 12);
  const std::string path = temp_path(".png");
  {
    png_image png;
    std::memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    png.width = img.width;
    png.height = img.height;
    png.format = PNG_FORMAT_RGB;
    REQUIRE(png_image_write_to_file(&png, path.c_str(), 0, img.rgb.data(), 0, nullptr));
  }
  const std::string text = "sampled";
  const Child a =
      run("--preset tiny --json --max-tokens 16 --temperature 0.8 --top-p 0.9 --top-k 40 --seed 7 "
          "--prompt '" +
          text + "' --image " + path);
  const Child bad = run("--preset tiny --prompt x --temperature 2.5");
  std::filesystem::remove(path);
  REQUIRE(a.status == 0);
  CHECK(bad.status == 2);

  auto r = test::runner_for("tiny");
  GenerateOptions opts;
  opts.max_tokens = 16;
  opts.sampling = SamplingParams{0.8f, 0.9f, 40, 7};
  auto mine = generate(*r, text, &img, opts);
  REQUIRE(mine.ok());
  CHECK(stable_part(a.out) == stable_part(to_json(*mine)));
  opts.sampling = {};
  auto greedy = generate(*r, text, &img, opts);
  REQUIRE(greedy.ok());
  CHECK(greedy->tokens != mine->tokens);
}
