#include "vqa_bench.hpp"

#include <httplib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "cluster.hpp"
#include "epd/config/cluster_config.hpp"
#include "epd/http/base64.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/model/vision.hpp"
#include "stats.hpp"
#include "vqa.hpp"

namespace epd::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using model::testing::VqaAnswer;
using model::testing::VqaQuestion;

std::string png_uri(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
  return "data:image/png;base64," + epd::http::base64_encode(bytes);
}

struct ClusterAnswer {
  std::string text;
  size_t completion_tokens = 0;
  double ttft_ms = 0;  // the router's (epd.first_token_ms)
};

// Every question through the router's chat route, `concurrency` in flight; returns the wall time.
double ask_cluster(const std::string& host, int port, const std::vector<VqaQuestion>& questions,
                   int concurrency, std::vector<ClusterAnswer>& out) {
  out.assign(questions.size(), {});
  std::atomic<size_t> next{0};
  std::vector<std::future<void>> clients;
  const auto start = Clock::now();
  for (int c = 0; c < concurrency; ++c)
    clients.push_back(std::async(std::launch::async, [&] {
      httplib::Client cli(host, port);
      cli.set_read_timeout(std::chrono::seconds(120));
      for (size_t i; (i = next++) < questions.size();) {
        const json content = model::testing::vqa_openai_content(questions[i], png_uri(questions[i].image));
        const json body = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 48}};
        auto r = cli.Post("/v1/chat/completions", body.dump(), "application/json");
        if (!r || r->status != 200)
          throw std::runtime_error("the cluster failed question " + std::to_string(i) + ": " +
                                   (r ? r->body : httplib::to_string(r.error())));
        const json j = json::parse(r->body);
        out[i] = {j["choices"][0]["message"]["content"], j["usage"]["completion_tokens"],
                  j["epd"]["first_token_ms"]};
      }
    }));
  for (auto& c : clients) c.get();
  return ms_since(start);
}

}  // namespace

int run_vqa(int argc, char** argv) {
  CLI::App app{
      "epd-bench vqa: the demo model's accuracy per question type through a cluster, colocated and "
      "llama.cpp, their agreement, images/s and TTFT"};
  std::string config = std::string(EPD_SOURCE_DIR) + "/configs/local.toml";
  int scenes = 500, seed = 2, concurrency = 4;
  unsigned threads = 1;
  std::string keep, painter = "scenes", order = "both";
  app.add_option("--painter", painter,
                 "who draws the pictures: scenes (the training renderer) or imagemagick (another program, "
                 "at 64, 96 and 128 pixels)")
      ->check(CLI::IsMember({"scenes", "imagemagick"}));
  app.add_option("--order", order,
                 "where the picture stands in the user turn: after the question (question-first, OpenAI's "
                 "examples), before it (picture-first, LLaVA's prompts), or each question both ways")
      ->check(CLI::IsMember({"question-first", "picture-first", "both"}));
  app.add_option("--config", config, "a cluster config serving the demo model (its [model] path and mmproj)");
  app.add_option("--scenes", scenes, "pictures, each asked one question of every type");
  app.add_option("--seed", seed, "scene seed (training used 1; 2 is the committed held-out set)");
  app.add_option("--concurrency", concurrency, "requests in flight at the cluster");
  app.add_option("--threads", threads, "compute threads of the colocated runner and of llama.cpp");
  app.add_option("--keep", keep, "draw the pictures into this directory and keep them");
  CLI11_PARSE(app, argc, argv);
  if (scenes < 1 || concurrency < 1 || threads < 1) {
    std::fprintf(stderr, "epd-bench vqa: needs --scenes, --concurrency and --threads >= 1\n");
    return 2;
  }
  auto cfg = config::load_cluster_config(config);
  if (!cfg) {
    std::fprintf(stderr, "epd-bench vqa: %s\n", cfg.error().to_string().c_str());
    return 2;
  }
  if (cfg->model.path.empty() || cfg->model.mmproj.empty()) {
    std::fprintf(stderr, "epd-bench vqa: %s serves no model with an mmproj ([model] path and mmproj)\n",
                 config.c_str());
    return 2;
  }
  const std::string lm = cfg->model.path.string(), mmproj = cfg->model.mmproj.string();
  const fs::path dir = keep.empty()
                           ? fs::temp_directory_path() / ("epd-bench-vqa-" + std::to_string(::getpid()))
                           : fs::absolute(keep);
  int rc = 0;
  try {
    // The pictures: the demo model's own scene generator, or ImageMagick's convert drawing the same scenes
    // (Debian's python3, python3-numpy and imagemagick).
    const std::string tool = painter == "scenes" ? "scenes.py images" : "draw_imagemagick.py";
    const std::string draw = "/usr/bin/python3 " + std::string(EPD_SOURCE_DIR) + "/tools/demo-model/" + tool +
                             " " + std::to_string(seed) + " " + std::to_string(scenes) + " '" + dir.string() +
                             "'";
    std::fprintf(stderr, "drawing %d scenes (seed %d) with %s\n", scenes, seed, painter.c_str());
    if (std::system(draw.c_str()) != 0) throw std::runtime_error("failed: " + draw);
    auto questions = model::testing::read_vqa(dir, model::testing::VqaPick::every);
    if (order == "picture-first") questions = model::testing::picture_first(std::move(questions));
    if (order == "both") {
      const auto first = model::testing::picture_first(questions);
      questions.insert(questions.end(), first.begin(), first.end());
    }
    // Rows per question type, and per order when both are asked.
    const auto label = [&](const model::testing::VqaQuestion& q) {
      return order == "both" && q.picture_first ? "pic+" + q.type : q.type;
    };

    auto base = model::read_checkpoint_config(lm);
    if (!base) throw std::runtime_error(base.error().to_string());
    model::ModelConfig mcfg = model::with_mmproj(*base, mmproj);
    mcfg.threads = threads;
    auto codec = model::PromptCodec::for_model(mcfg);
    if (!codec) throw std::runtime_error(codec.error().to_string());
    const model::TokenId slot = *model::image_token(mcfg);

    std::fprintf(stderr, "colocated: %zu questions\n", questions.size());
    auto runner = model::make_vision_runner(mcfg);
    if (!runner) throw std::runtime_error(runner.error().to_string());
    std::vector<VqaAnswer> colocated;
    std::vector<double> colocated_ms;
    const auto colocated_start = Clock::now();
    for (const auto& q : questions) {
      const auto t = Clock::now();
      colocated.push_back(model::testing::ask_colocated(**runner, **codec, q));
      colocated_ms.push_back(ms_since(t));
    }
    const double colocated_wall = ms_since(colocated_start);

    std::fprintf(stderr, "llama.cpp: %zu questions\n", questions.size());
    std::vector<VqaAnswer> llama;
    const std::string reference = sibling_executable("epd-mtmd-reference");
    for (const auto& q : questions)
      llama.push_back(model::testing::ask_llama_cpp(reference, lm, mmproj, **codec, slot, q, 48,
                                                    static_cast<int>(threads)));

    std::fprintf(stderr, "cluster: starting %s\n", config.c_str());
    const auto [host, port] = router_address(*cfg);
    auto cluster = start_cluster(config, host, port, cfg->instances.size());
    if (!cluster) throw std::runtime_error("the cluster of " + config + " did not start");
    std::vector<ClusterAnswer> served;
    ask_cluster(host, port, {questions.begin(), questions.begin() + std::min<size_t>(20, questions.size())},
                concurrency, served);  // warm-up
    const double cluster_wall = ask_cluster(host, port, questions, concurrency, served);
    cluster->stop();

    model::testing::VqaTally t_cluster, t_colocated, t_llama, agree_cluster, agree_llama;
    std::vector<double> ttft;
    for (size_t i = 0; i < questions.size(); ++i) {
      const auto& q = questions[i];
      const std::string type = label(q);
      t_cluster.add(type, served[i].text == q.answer);
      t_colocated.add(type, colocated[i].text == q.answer);
      t_llama.add(type, llama[i].text == q.answer);
      agree_cluster.add(type,
                        served[i].text == colocated[i].text &&
                            served[i].completion_tokens == colocated[i].tokens.size() + colocated[i].ended);
      agree_llama.add(type, llama[i].tokens == colocated[i].tokens);
      ttft.push_back(served[i].ttft_ms);
    }
    std::printf(
        "epd-bench vqa: %s + %s, %d scenes of seed %d drawn by %s, one question of each type each, %s "
        "(%zu); greedy\n",
        fs::path(lm).filename().c_str(), fs::path(mmproj).filename().c_str(), scenes, seed, painter.c_str(),
        order == "both" ? "both orders (pic+: the picture first)" : order.c_str(), questions.size());
    std::printf(
        "cluster: %s, %d in flight; colocated and llama.cpp (epd-mtmd-reference): %u thread(s), one "
        "at a time\n\n",
        config.c_str(), concurrency, threads);
    std::printf("%-13s %5s | %8s %10s %10s | %18s %18s\n", "type", "n", "cluster", "colocated", "llama.cpp",
                "cluster=colocated", "colocated=llama");
    auto row = [&](const std::string& name, auto rate_of) {
      std::printf("%-13s %5zu | %7.1f%% %9.1f%% %9.1f%% | %17.1f%% %17.1f%%\n", name.c_str(),
                  name == "all" ? questions.size() : t_cluster.asked(name), 100 * rate_of(t_cluster),
                  100 * rate_of(t_colocated), 100 * rate_of(t_llama), 100 * rate_of(agree_cluster),
                  100 * rate_of(agree_llama));
    };
    for (const auto& type : t_cluster.types())
      row(type, [&](const model::testing::VqaTally& t) { return t.rate(type); });
    row("all", [](const model::testing::VqaTally& t) { return t.overall(); });
    const double n = static_cast<double>(questions.size());
    std::printf(
        "\ncluster:   %.1f images/s (%d in flight), TTFT p50 %.1f ms, p99 %.1f ms (router-measured)\n",
        n / (cluster_wall / 1000), concurrency, percentile(ttft, 50), percentile(ttft, 99));
    std::printf("colocated: %.1f images/s (one at a time), whole answer p50 %.1f ms\n",
                n / (colocated_wall / 1000), percentile(colocated_ms, 50));
    size_t shown = 0;
    for (size_t i = 0; i < questions.size() && shown < 12; ++i)
      if (served[i].text != questions[i].answer) {
        std::printf("  wrong: %s '%s'%s: '%s' (right: '%s')\n", questions[i].image.filename().c_str(),
                    questions[i].question.c_str(), questions[i].picture_first ? " (picture first)" : "",
                    served[i].text.c_str(), questions[i].answer.c_str());
        ++shown;
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "epd-bench vqa: %s\n", e.what());
    rc = 1;
  }
  if (keep.empty()) fs::remove_all(dir);
  return rc;
}

}  // namespace epd::bench

int run_vqa_bench(int argc, char** argv) {
  return epd::bench::run_vqa(argc, argv);
}
