#include "vision_bench.hpp"

#include <httplib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "cluster.hpp"
#include "epd/http/base64.hpp"
#include "epd/launcher/free_port.hpp"
#include "epd/model/chat.hpp"
#include "epd/model/image.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/vision.hpp"
#include "stats.hpp"
#include "vision_fixture.hpp"
#include "vision_oracle.hpp"

namespace epd::bench {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kSide = 256;  // every image is kSide x kSide
constexpr const char* kText = "What is in the picture?";
constexpr double kMiB = 1024.0 * 1024.0;

// Big enough that encode times are not noise, small enough for a run of minutes on 2 cores; the LM (f32,
// ~100 MiB) is bigger than the whole encoder process, which loads only its vocabulary.
// Layouts by name: LLaVA-1.5 and 1.6, SmolVLM, Pixtral-12B and Mistral-Small-3.1 (Pixtral with the patch
// merger), InternVL, Gemma 3, Qwen2.5-VL.
const char* const kLayouts[] = {"llava-1.5",   "llava-1.6", "idefics3", "pixtral",
                                "mistral-3.1", "internvl",  "gemma3",   "qwen2.5-vl"};

model::testing::VisionSpec bench_spec(const std::string& layout) {
  model::testing::VisionSpec s;
  s.lm_width = 512, s.lm_layers = 8, s.lm_heads = 8, s.lm_kv_heads = 4, s.lm_context = 2048;
  s.vision_width = 256, s.vision_heads = 4, s.vision_ffn = 1024, s.vision_layers = 6;
  if (layout == "llava-1.5" || layout == "llava-1.6") {
    s.projector = "mlp";
    s.image_size = 224, s.patch_size = 14;  // 256 rows a tile
    if (layout == "llava-1.6") {            // 2 x 1 tiles + the overview: 768 rows an image
      s.pinpoints = {448, 224, 224, 448};   // (4 images of 2 x 2 + overview would overflow a slot)
      s.lm_context = 4096;
    }
  } else if (layout == "gemma3") {  // 32 x 32 patches pooled to 8 x 8 = 64 rows (its LM: gemma3)
    s.projector = "gemma3";
    s.image_size = 448, s.patch_size = 14, s.scale_factor = 4;
  } else if (layout == "qwen2.5-vl") {  // 9 x 9 cells of 28 pixels: 81 rows (its LM: qwen2vl, M-RoPE)
    s.projector = "qwen2.5vl";
  } else if (layout == "internvl") {  // 256 x 256: 2 x 2 tiles + the overview, 64 rows each
    s.projector = "internvl";
    s.image_size = 224, s.patch_size = 14, s.scale_factor = 2;
  } else if (layout == "idefics3") {
    s.projector = "idefics3";
    s.image_size = 128, s.patch_size = 16, s.scale_factor = 2, s.preproc_image_size = 256;  // 2x2 + overview
  } else {
    s.projector = "pixtral";  // 16 x 16 cells + 15 breaks; with the merger (28-pixel cells) 9 x 9 + 8
    if (layout == "mistral-3.1") s.spatial_merge = 2;
  }
  return s;
}

struct VisionRow {
  std::string layout;
  size_t images = 0;
  std::vector<double> llama_encode, epd_encode, llama_ttft, epd_ttft, encode, prefill, transfer;
};

struct Memory {
  std::string id;
  double rss = 0, pss = 0, lm = 0, mmproj = 0;  // MiB; lm and mmproj: PSS of those files' mappings
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The role processes of the cluster started from `config` (their command line names it), by --id.
std::vector<std::pair<pid_t, std::string>> role_processes(const std::string& config) {
  std::vector<std::pair<pid_t, std::string>> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::vector<std::string> args;
    std::istringstream cmd(slurp(e.path() / "cmdline"));
    for (std::string a; std::getline(cmd, a, '\0');) args.push_back(a);
    bool ours = false;
    std::string id;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      ours |= args[i] == "--config" && args[i + 1] == config;
      if (args[i] == "--id") id = args[i + 1];
    }
    if (ours && !id.empty()) out.emplace_back(std::stoi(pid), id);
  }
  return out;
}

Memory memory_of(pid_t pid, const std::string& id, const std::string& lm, const std::string& mmproj) {
  Memory m{id};
  std::istringstream status(slurp("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) m.rss = std::stod(line.substr(6)) / 1024;
  std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
  double* file = nullptr;  // the mapping being read is of lm or mmproj
  for (std::string line; std::getline(smaps, line);) {
    if (line.rfind("Pss:", 0) == 0) {
      const double mb = std::stod(line.substr(4)) / 1024;
      m.pss += mb;
      if (file) *file += mb;
    } else if (const size_t slash = line.find(" /"); line.find(':') > line.find(' ') && slash != line.npos) {
      const std::string path = line.substr(slash + 1);  // "start-end perms offset dev inode path"
      file = path == lm ? &m.lm : path == mmproj ? &m.mmproj : nullptr;
    } else if (line.find(':') > line.find(' ')) {
      file = nullptr;  // an anonymous mapping
    }
  }
  return m;
}

json post_generate(httplib::Client& c, const std::vector<model::Image>& images, double& latency_ms) {
  json body{{"prompt", kText}, {"max_tokens", 1}, {"images", json::array()}};
  for (const auto& image : images)
    body["images"].push_back(epd::http::base64_encode(model::encode_ppm(image)));
  const std::string text = body.dump();
  const auto start = Clock::now();
  auto r = c.Post("/v1/generate", text, "application/json");
  latency_ms = ms_since(start);
  if (!r || r->status != 200)
    throw std::runtime_error("the cluster did not answer: " + (r ? r->body : std::string("no reply")));
  return json::parse(r->body);
}

// One layout: its pair written into dir, then llama.cpp, epd in-process, epd's cluster; a row per image
// count.
std::vector<VisionRow> run_layout(const std::string& layout, const fs::path& dir, int reps, unsigned threads,
                                  std::vector<Memory>& memory, uintmax_t& lm_bytes, uintmax_t& mmproj_bytes) {
  std::fprintf(stderr, "vision %s: writing the pair into %s\n", layout.c_str(), dir.c_str());
  auto paths = model::testing::write_vision_model(bench_spec(layout), dir);
  if (!paths) throw std::runtime_error(paths.error().to_string());
  const std::string lm = fs::canonical(paths->lm).string(), mmproj = fs::canonical(paths->mmproj).string();
  lm_bytes = fs::file_size(lm), mmproj_bytes = fs::file_size(mmproj);
  auto checkpoint = model::read_checkpoint_config(lm);
  if (!checkpoint) throw std::runtime_error(checkpoint.error().to_string());
  model::ModelConfig cfg = model::with_mmproj(*checkpoint, mmproj);
  cfg.threads = threads;
  const model::TokenId image_id = *model::image_token(cfg);

  // Distinct images everywhere (seeds differ), so epd's embedding cache never hits; one more set warms up.
  std::vector<VisionRow> rows;
  std::vector<std::vector<model::Image>> sets[2];  // [1 image, 4 images][rep]
  std::vector<std::vector<fs::path>> files[2];
  for (size_t n : {size_t(1), size_t(4)}) {
    rows.emplace_back();
    rows.back().layout = layout, rows.back().images = n;
    for (int rep = 0; rep <= reps; ++rep) {
      sets[n > 1].emplace_back();
      files[n > 1].emplace_back();
      for (size_t k = 0; k < n; ++k) {
        sets[n > 1].back().push_back(model::make_test_image(kSide, kSide, 1000 * n + rep * n + k));
        files[n > 1].back().push_back(dir / ("image-" + std::to_string(n) + "-" + std::to_string(rep) + "-" +
                                             std::to_string(k) + ".png"));
        model::testing::write_png_file(files[n > 1].back().back(), sets[n > 1].back().back());
      }
    }
  }

  const std::string reference = sibling_executable("epd-mtmd-reference");
  for (VisionRow& row : rows) {
    const size_t i = row.images > 1;
    std::string markers;
    for (size_t k = 0; k < row.images; ++k) markers += model::kImageMarker;
    for (int rep = 0; rep <= reps; ++rep) {  // rep `reps` warms up (page cache, the binary)
      std::fprintf(stderr, "\r  llama.cpp, %zu image(s): %d/%d", row.images, rep, reps);
      const auto run = model::testing::run_mtmd_reference(reference, lm, mmproj, files[i][reps - rep],
                                                          markers + kText, 1, image_id);
      if (rep == 0) continue;
      double sum = 0;
      for (double ms : run.encode_ms) sum += ms;
      row.llama_encode.push_back(sum / double(row.images));
      row.llama_ttft.push_back(run.ttft_ms);
    }
    std::fprintf(stderr, "\n");
  }
  {
    auto encoder = model::make_vision_encoder(cfg);
    if (!encoder) throw std::runtime_error(encoder.error().to_string());
    for (VisionRow& row : rows)
      for (int rep = 0; rep <= reps; ++rep) {
        const auto start = Clock::now();
        for (const auto& image : sets[row.images > 1][reps - rep])
          if (auto e = (*encoder)->encode(image); !e) throw std::runtime_error(e.error().to_string());
        if (rep > 0) row.epd_encode.push_back(ms_since(start) / double(row.images));
      }
  }

  const std::string config = (dir / "cluster.toml").string();
  const int http_port = launcher::free_port();
  {
    std::ofstream out(config);
    out << "[cluster]\nname = \"vision\"\nregistry = \"router\"\n\n[model]\npath = \"" << lm
        << "\"\nmmproj = \"" << mmproj << "\"\nthreads = " << threads
        << "\n\n[transport]\nbackend = \"shm\"\nhost = \"127.0.0.1\"\n\n";
    for (const char* role : {"router", "encoder", "prefill", "decode"}) {
      out << "[[instance]]\nid = \"" << role << "\"\nrole = \"" << role
          << "\"\ncontrol = \"tcp://127.0.0.1:" << launcher::free_port() << "\"\n";
      if (std::string(role) == "router") out << "http = \"127.0.0.1:" << http_port << "\"\n";
      out << "\n";
    }
  }
  std::fprintf(stderr, "  starting the cluster\n");
  auto cluster = start_cluster(config, "127.0.0.1", http_port, 3);
  if (!cluster) throw std::runtime_error("the cluster did not start");
  httplib::Client c("127.0.0.1", http_port);
  c.set_read_timeout(std::chrono::seconds(120));
  double latency = 0;
  post_generate(c, {model::make_test_image(kSide, kSide, 999999)}, latency);  // warm-up
  for (VisionRow& row : rows)
    for (int rep = 0; rep < reps; ++rep) {
      const json t = post_generate(c, sets[row.images > 1][rep], latency)["timings_ms"];
      row.epd_ttft.push_back(latency);
      row.encode.push_back(t["encode"].get<double>());
      row.prefill.push_back(t["prefill"].get<double>());
      row.transfer.push_back(t["kv_transfer"].get<double>());
    }
  for (const auto& [pid, id] : role_processes(config))
    if (id != "router") memory.push_back(memory_of(pid, layout + " " + id, lm, mmproj));
  cluster->stop();
  return rows;
}

}  // namespace

int run_vision(int argc, char** argv) {
  CLI::App app{"epd-bench vision: image encode and TTFT, epd's encoder against llama.cpp on the same files"};
  int reps = 5;
  unsigned threads = 2;
  std::string keep;
  app.add_option("--reps", reps, "requests per cell (medians are printed)");
  app.add_option("--threads", threads, "compute threads of epd's encoder and of every role");
  app.add_option("--keep", keep, "write the model pairs and images into this directory and keep them");
  CLI11_PARSE(app, argc, argv);
  if (reps < 1 || threads < 1) {
    std::fprintf(stderr, "epd-bench vision: needs --reps >= 1 and --threads >= 1\n");
    return 2;
  }
  const fs::path root = keep.empty()
                            ? fs::temp_directory_path() / ("epd-bench-vision-" + std::to_string(::getpid()))
                            : fs::absolute(keep);
  std::vector<VisionRow> rows;
  std::vector<Memory> memory;
  std::vector<std::string> sizes;
  int rc = 0;
  try {
    for (const char* layout : kLayouts) {
      uintmax_t lm = 0, mmproj = 0;
      for (auto& row : run_layout(layout, root / layout, reps, threads, memory, lm, mmproj))
        rows.push_back(row);
      char line[160];
      std::snprintf(line, sizeof line, "%s: lm.gguf %.1f MiB, mmproj.gguf %.1f MiB", layout,
                    double(lm) / kMiB, double(mmproj) / kMiB);
      sizes.push_back(line);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "epd-bench vision: %s\n", e.what());
    rc = 1;
  }
  if (keep.empty()) fs::remove_all(root);
  if (rc) return rc;

  std::printf(
      "epd-bench vision: %ux%u images, prompt \"%s\", 1 token, medians of %d requests; epd %u thread(s), "
      "llama.cpp (epd-mtmd-reference) 2\n\n",
      kSide, kSide, kText, reps, threads);
  std::printf("%-11s %4s | %-26s | %-28s | %s\n", "", "", "encode ms/image", "TTFT ms",
              "epd cluster stages ms");
  std::printf("%-11s %4s | %7s %7s %10s | %7s %8s %11s | %7s %8s %11s\n", "layout", "imgs", "llama", "epd",
              "epd/llama", "llama", "epd", "epd/llama", "encode", "prefill", "kv_transfer");
  for (const VisionRow& r : rows) {
    const double le = percentile(r.llama_encode, 50), ee = percentile(r.epd_encode, 50);
    const double lt = percentile(r.llama_ttft, 50), et = percentile(r.epd_ttft, 50);
    std::printf("%-11s %4zu | %7.1f %7.1f %9.2fx | %7.1f %8.1f %10.2fx | %7.1f %8.1f %11.2f\n",
                r.layout.c_str(), r.images, le, ee, ee / le, lt, et, et / lt, percentile(r.encode, 50),
                percentile(r.prefill, 50), percentile(r.transfer, 50));
  }
  std::printf("\nfiles:");
  for (const std::string& s : sizes) std::printf(" %s;", s.c_str());
  std::printf("\n");
  std::printf("role memory after the runs (MiB; lm / mmproj = PSS of that file's mappings):\n");
  for (const Memory& m : memory)
    std::printf("  %-18s RSS %7.1f  PSS %7.1f  lm %6.1f  mmproj %6.1f\n", m.id.c_str(), m.rss, m.pss, m.lm,
                m.mmproj);
  return 0;
}

}  // namespace epd::bench

int run_vision_bench(int argc, char** argv) {
  return epd::bench::run_vision(argc, argv);
}
