// The router's dashboard (GET /) in a real browser: Debian's headless Chromium, driven by playwright-core
// (tests/http/node/dashboard.mjs), against a real cluster serving the demo model (tools/demo-model). The
// page must show every instance healthy, list a failed request with its code, stream a playground answer
// about one of its sample pictures that is right (and equal to the same request answered at once), and
// chart what happened; the screenshot is kept as a test artifact.
#include <httplib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cluster.hpp"
#include "epd/http/base64.hpp"
#include "openai_support.hpp"

using namespace epd::testing;
using nlohmann::json;

namespace {

const std::string kPng = std::string(EPD_SOURCE_DIR) + "/tests/http/node/fixtures/checker.png";
const std::string kDemo = std::string(EPD_SOURCE_DIR) + "/tools/demo-model/out/";
// The playground's sample picture 1 is the demo model's held-out scene 2-0; what it shows:
const std::string kSample = std::string(EPD_SOURCE_DIR) + "/http/dashboard/sample-1.png";
const std::string kSampleTruth =
    "A large green circle on the left, a small orange square in the centre and a large red triangle at the "
    "bottom.";
const std::string kChromium = "/usr/bin/chromium";
const std::string kScreenshot = std::string(EPD_ARTIFACT_DIR) + "/dashboard.png";
const std::string kPrompt = "Describe the picture.";
constexpr int kMaxTokens = 48;
constexpr int kFailPromptBytes = 2000;  // over the demo model's 256-token context, under the HTTP limit

// Fails (never skips) when the browser test cannot run: a missing tool must not pass as a green test.
void require_browser() {
  std::string missing = node_sdk_missing();
  if (missing.empty() &&
      !std::filesystem::exists(node_sdk_dir() + "/node_modules/playwright-core/package.json"))
    missing = "playwright-core is not installed in " + node_sdk_dir() +
              "/node_modules; run scripts/setup-deps (npm ci in tests/http/node)";
  if (missing.empty() && !std::filesystem::exists(kChromium))
    missing = "chromium is not installed at " + kChromium + "; run scripts/setup-deps";
  INFO(missing);
  REQUIRE(missing.empty());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string png_data_uri(const std::string& file) {
  const std::string png = read_file(file);
  REQUIRE(png.size() > 8);
  return "data:image/png;base64," +
         epd::http::base64_encode({reinterpret_cast<const uint8_t*>(png.data()), png.size()});
}

// The last line of the script's output that is a JSON object: what the page showed.
json page_facts(const std::string& output) {
  json facts;
  for (size_t pos = 0; pos < output.size();) {
    const size_t end = output.find('\n', pos);
    const auto line = output.substr(pos, end - pos);
    pos = end == std::string::npos ? output.size() : end + 1;
    auto j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("instances")) facts = std::move(j);
  }
  return facts;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

}  // namespace

TEST_CASE("dashboard: headless Chromium shows every instance and a streamed answer and live charts",
          "[e2e][multiproc][dashboard]") {
  require_browser();
  ClusterSpec spec;  // 1 encoder, 1 prefill, 1 decode
  spec.model_path = kDemo + "lm.gguf";
  spec.mmproj = kDemo + "mmproj.gguf";
  // A checkpoint's caches reuse whole prefill chunks only (docs/caches.md, "Exactness"): chunks of one page
  // let the playground's prompt, a few pages long, hit.
  spec.defaults["prefill"] = "chunk_tokens = 16\n";
  Cluster cluster(spec);
  cluster.start();
  std::filesystem::create_directories(EPD_ARTIFACT_DIR);
  std::filesystem::remove(kScreenshot);

  // The request the playground streams below, asked first at once: its answer is what the page must show,
  // and the page's request then finds the prompt in the prefix caches.
  const json request = {
      {"messages",
       json::array({{{"role", "user"},
                     {"content", json::array({{{"type", "text"}, {"text", kPrompt}},
                                              {{"type", "image_url"},
                                               {"image_url", {{"url", png_data_uri(kSample)}}}}})}}})},
      {"max_tokens", kMaxTokens},
      {"temperature", 0}};
  const auto [status, body] = cluster.post_raw("/v1/chat/completions", request.dump());
  REQUIRE(status == 200);
  const json whole = json::parse(body);

  const std::string url = "http://127.0.0.1:" + std::to_string(cluster.http_port()) + "/";
  const auto run = run_command({"node", node_sdk_dir() + "/dashboard.mjs", "--url", url, "--expect",
                                join(cluster.ids()), "--image", kPng, "--sample", "1", "--prompt", kPrompt,
                                "--max-tokens", std::to_string(kMaxTokens), "--fail-prompt-bytes",
                                std::to_string(kFailPromptBytes), "--screenshot", kScreenshot});
  INFO("dashboard.mjs output:\n" << run.output);
  REQUIRE(run.exit_code == 0);
  const json facts = page_facts(run.output);
  REQUIRE(facts.is_object());

  for (const auto& id : cluster.ids()) {
    INFO("instance " << id);
    bool shown = false;
    for (const auto& row : facts["instances"])
      if (row["id"] == id) shown = row["healthy"].get<bool>();
    CHECK(shown);
  }
  CHECK(facts["instances"].size() == cluster.ids().size());

  // The streamed answer describes the sample picture, and is what the same request gives at once.
  const json& answer = facts["answer"];
  CHECK(answer["state"] == "done");
  const std::string streamed = answer["text"];
  CHECK(streamed == kSampleTruth);
  CHECK(whole["choices"][0]["message"]["content"] == streamed);
  CHECK(whole["choices"][0]["finish_reason"] == answer["finish_reason"]);
  CHECK(whole["usage"]["completion_tokens"] == answer["completion_tokens"]);

  // Every chart got points with something in them.
  for (const char* chart : {"requests", "tokens", "ttft", "bandwidth"}) {
    INFO("chart " << chart << ": " << facts["charts"].dump());
    CHECK(facts["charts"][chart]["points"].get<int>() > 0);
    CHECK(facts["charts"][chart]["peak"].get<double>() > 0);
  }

  // The over-long prompt: the playground showed the router's error and the failures list has it.
  const json& failure = facts["failure"];
  CHECK(failure["playground"]["code"] == "invalid_request");
  CHECK(failure["playground"]["status"] == 400);
  CHECK(failure["listed"]["code"] == "invalid_request");
  CHECK(failure["listed"]["status"] == 400);
  CHECK(failure["listed"]["text"].get<std::string>().find("does not fit max_seq 256") != std::string::npos);

  // The page and the API agree on both requests.
  httplib::Client api("127.0.0.1", cluster.http_port());
  auto res = api.Get("/v1/activity");
  REQUIRE(res);
  const json activity = json::parse(res->body);
  bool saw_failure = false, saw_answer = false;
  for (const auto& e : activity["entries"]) {
    if (e["request_id"] == failure["playground"]["request_id"])
      saw_failure = e["status"] == 400 && e["error"]["code"] == "invalid_request";
    if (e["request_id"] == answer["request_id"])
      saw_answer =
          e["status"] == 200 && e["stream"] == true && e["completion_tokens"] == answer["completion_tokens"];
  }
  CHECK(saw_failure);
  CHECK(saw_answer);

  // The prefix caches' figures: the page's prefill row shows the hits of the streamed answer (its prompt
  // was computed once before), the same figures /v1/instances has.
  bool shown_hits = false;
  for (const auto& row : facts["instances_after"]) {
    if (row["role"] != "prefill") continue;
    const json api_row = cluster.instance(row["id"]);
    INFO(row.dump() << "\n" << api_row.dump());
    CHECK(row["cache_hit"].get<double>() > 0);
    CHECK(row["cache_hit"] == api_row["prefix_hit_tokens"]);
    CHECK(row["cache_lookups"].get<double>() ==
          api_row["prefix_hit_tokens"].get<double>() + api_row["prefix_missed_tokens"].get<double>());
    shown_hits = row["text"].get<std::string>().find("cache hit ") != std::string::npos;
  }
  CHECK(shown_hits);

  // The screenshot: a PNG of a real page, not an empty one.
  REQUIRE(std::filesystem::exists(kScreenshot));
  const std::string png = read_file(kScreenshot);
  CHECK(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(png.size() > 10 * 1024);
}
