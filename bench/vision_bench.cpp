#include "vision_bench.hpp"

#include <httplib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
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
#include "epd/model/chat_template.hpp"
#include "epd/model/image.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/media.hpp"
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
constexpr double kClipSeconds = 10;  // every clip: 16 kHz mono, one 30 s Whisper chunk
constexpr const char* kAudioText = "What do you hear?";
constexpr double kMiB = 1024.0 * 1024.0;

// Big enough that encode times are not noise, small enough for a run of minutes on 2 cores; the LM (f32,
// ~100 MiB) is bigger than the whole encoder process, which loads only its vocabulary.
// Layouts by name: LLaVA-1.5 and 1.6, SmolVLM, Pixtral-12B and Mistral-Small-3.1 (Pixtral with the patch
// merger), InternVL, Gemma 3, Qwen2.5-VL; the audio towers Ultravox and Qwen2-Audio, whose items are clips.
const char* const kLayouts[] = {"llava-1.5", "llava-1.6", "idefics3",   "pixtral",  "mistral-3.1",
                                "internvl",  "gemma3",    "qwen2.5-vl", "ultravox", "qwen2-audio"};

bool is_audio(const std::string& layout) {
  return layout == "ultravox" || layout == "qwen2-audio";
}

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
  } else if (is_audio(layout)) {  // Whisper's 1500 rows a chunk stacked by 4 to 375, or pooled to 750
    s.projector = layout == "ultravox" ? "ultravox" : "qwen2a";  // (qwen2a's LM: qwen2)
    s.lm_context = 4096;  // 4 clips: 1500 / 3000 rows in one slot of min(context, 4096)
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
  size_t items = 0;
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

// An item of a request, from a seed: a kSide x kSide picture or a kClipSeconds clip, written where llama.cpp
// reads it (`stem`.png or .wav). epd's encoder gets the picture, or the clip as the router decodes it; the
// cluster gets the picture's PPM or the WAV file.
struct Item {
  model::Media media;
  fs::path file;
  std::vector<uint8_t> bytes;
};

Item make_item(bool audio, uint64_t seed, const fs::path& stem) {
  if (!audio) {
    const model::Image image = model::make_test_image(kSide, kSide, seed);
    model::testing::write_png_file(stem.string() + ".png", image);
    return {image, stem.string() + ".png", model::encode_ppm(image)};
  }
  auto wav = model::testing::make_test_wav(model::kAudioSampleRate, 1, kClipSeconds, seed);
  auto clip = model::decode_audio(wav, UINT64_MAX);
  if (!clip) throw std::runtime_error(clip.error().to_string());
  std::ofstream(stem.string() + ".wav", std::ios::binary)
      .write(reinterpret_cast<const char*>(wav.data()), std::streamsize(wav.size()));
  return {std::move(*clip), stem.string() + ".wav", std::move(wav)};
}

// The prompt of n items for llama.cpp's program: a picture's markers before kText as /v1/generate lays them
// out, a clip's in a chat rendered by the LM's template (ChatML) as /v1/chat/completions does.
std::string oracle_prompt(bool audio, size_t n) {
  std::string markers;
  for (size_t k = 0; k < n; ++k) markers += model::kImageMarker;
  if (!audio) return markers + kText;
  const std::vector<model::ChatTurn> turns = {{"user", markers + kAudioText, true}};
  auto text = model::render_chat_text("", turns, "", "");
  if (!text) throw std::runtime_error(text.error().to_string());
  return *text;
}

// The router's epd_request_stage_seconds sums (ms) of encode, prefill and kv_transfer, from its /metrics.
std::array<double, 3> stage_sums(httplib::Client& metrics) {
  auto r = metrics.Get("/metrics");
  if (!r || r->status != 200) throw std::runtime_error("the router's /metrics did not answer");
  std::array<double, 3> ms{};
  const char* const stages[] = {"encode", "prefill", "kv_transfer"};
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);)
    for (size_t i = 0; i < ms.size(); ++i)
      if (line.rfind("epd_request_stage_seconds_sum{", 0) == 0 &&
          line.find("stage=\"" + std::string(stages[i]) + "\"") != std::string::npos)
        ms[i] += 1000 * std::stod(line.substr(line.rfind(' ') + 1));
  return ms;
}

struct Answer {
  double latency_ms = 0;
  std::array<double, 3> stages_ms{};  // as stage_sums
};

// One request through the router: pictures as /v1/generate's PPMs (before kText), clips as input_audio parts
// of an OpenAI chat (before kAudioText). The stage times are the change of the router's sums over it (a
// chat's reply has no timings_ms); requests go one at a time.
Answer post_items(httplib::Client& c, httplib::Client& metrics, const std::vector<Item>& items,
                  size_t oracle_prompt_tokens = 0) {
  const bool audio = !items.empty() && std::holds_alternative<model::Audio>(items[0].media);
  json body{{"max_tokens", 1}};
  if (audio) {
    json parts = json::array();
    for (const Item& item : items)
      parts.push_back({{"type", "input_audio"},
                       {"input_audio", {{"data", epd::http::base64_encode(item.bytes)}, {"format", "wav"}}}});
    parts.push_back({{"type", "text"}, {"text", kAudioText}});
    body["messages"] = json::array({{{"role", "user"}, {"content", parts}}});
  } else {
    body["prompt"] = kText, body["images"] = json::array();
    for (const Item& item : items) body["images"].push_back(epd::http::base64_encode(item.bytes));
  }
  const auto before = stage_sums(metrics);
  const auto start = Clock::now();
  auto r = c.Post(audio ? "/v1/chat/completions" : "/v1/generate", body.dump(), "application/json");
  Answer a{ms_since(start)};
  if (!r || r->status != 200)
    throw std::runtime_error("the cluster did not answer: " + (r ? r->body : std::string("no reply")));
  const json reply = json::parse(r->body);
  // A chat says how long its prompt was: the one llama.cpp's program ran, or the comparison is off.
  if (oracle_prompt_tokens && reply.contains("usage") &&
      reply["usage"]["prompt_tokens"].get<size_t>() != oracle_prompt_tokens)
    throw std::runtime_error("epd's prompt has " + reply["usage"]["prompt_tokens"].dump() +
                             " tokens, llama.cpp's " + std::to_string(oracle_prompt_tokens));
  const auto after = stage_sums(metrics);
  for (size_t i = 0; i < a.stages_ms.size(); ++i) a.stages_ms[i] = after[i] - before[i];
  return a;
}

// One layout: its pair written into dir, then llama.cpp, epd in-process, epd's cluster; a row per item
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
  const bool audio = is_audio(layout);

  // Distinct items everywhere (seeds differ), so epd's embedding cache never hits; one more set warms up.
  std::vector<VisionRow> rows;
  std::vector<std::vector<Item>> sets[2];  // [1 item, 4 items][rep]
  for (size_t n : {size_t(1), size_t(4)}) {
    rows.emplace_back();
    rows.back().layout = layout, rows.back().items = n;
    for (int rep = 0; rep <= reps; ++rep) {
      sets[n > 1].emplace_back();
      for (size_t k = 0; k < n; ++k)
        sets[n > 1].back().push_back(make_item(
            audio, 1000 * n + rep * n + k,
            dir / ("item-" + std::to_string(n) + "-" + std::to_string(rep) + "-" + std::to_string(k))));
    }
  }

  const std::string reference = sibling_executable("epd-mtmd-reference");
  size_t oracle_tokens[2] = {};  // the prompt's length in llama.cpp, by item count
  for (VisionRow& row : rows) {
    const size_t i = row.items > 1;
    for (int rep = 0; rep <= reps; ++rep) {  // rep `reps` warms up (page cache, the binary)
      std::fprintf(stderr, "\r  llama.cpp, %zu item(s): %d/%d", row.items, rep, reps);
      std::vector<fs::path> files;
      for (const Item& item : sets[i][reps - rep]) files.push_back(item.file);
      const auto run = model::testing::run_mtmd_reference(reference, lm, mmproj, files,
                                                          oracle_prompt(audio, row.items), 1, image_id);
      oracle_tokens[i] = run.prompt.size();
      if (rep == 0) continue;
      double sum = 0;
      for (double ms : run.encode_ms) sum += ms;
      row.llama_encode.push_back(sum / double(row.items));
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
        for (const Item& item : sets[row.items > 1][reps - rep])
          if (auto e = model::encode_media(**encoder, item.media); !e)
            throw std::runtime_error(e.error().to_string());
        if (rep > 0) row.epd_encode.push_back(ms_since(start) / double(row.items));
      }
  }

  const std::string config = (dir / "cluster.toml").string();
  const int http_port = launcher::free_port(), metrics_port = launcher::free_port();
  {
    std::ofstream out(config);
    out << "[cluster]\nname = \"vision\"\nregistry = \"router\"\n\n[model]\npath = \"" << lm
        << "\"\nmmproj = \"" << mmproj << "\"\nthreads = " << threads
        << "\n\n[transport]\nbackend = \"shm\"\nhost = \"127.0.0.1\"\n\n";
    for (const char* role : {"router", "encoder", "prefill", "decode"}) {
      out << "[[instance]]\nid = \"" << role << "\"\nrole = \"" << role
          << "\"\ncontrol = \"tcp://127.0.0.1:" << launcher::free_port() << "\"\n";
      if (std::string(role) == "router")
        out << "http = \"127.0.0.1:" << http_port << "\"\nmetrics = \"127.0.0.1:" << metrics_port << "\"\n";
      out << "\n";
    }
  }
  std::fprintf(stderr, "  starting the cluster\n");
  auto cluster = start_cluster(config, "127.0.0.1", http_port, 3);
  if (!cluster) throw std::runtime_error("the cluster did not start");
  httplib::Client c("127.0.0.1", http_port), metrics("127.0.0.1", metrics_port);
  c.set_read_timeout(std::chrono::seconds(120));
  post_items(c, metrics, {make_item(audio, 999999, dir / "warm-up")});
  for (VisionRow& row : rows)
    for (int rep = 0; rep < reps; ++rep) {
      const Answer a = post_items(c, metrics, sets[row.items > 1][rep], oracle_tokens[row.items > 1]);
      row.epd_ttft.push_back(a.latency_ms);
      row.encode.push_back(a.stages_ms[0]);
      row.prefill.push_back(a.stages_ms[1]);
      row.transfer.push_back(a.stages_ms[2]);
    }
  for (const auto& [pid, id] : role_processes(config))
    if (id != "router") memory.push_back(memory_of(pid, layout + " " + id, lm, mmproj));
  cluster->stop();
  return rows;
}

}  // namespace

int run_vision(int argc, char** argv) {
  CLI::App app{
      "epd-bench vision: image and audio encode and TTFT, epd's encoder against llama.cpp on the same files"};
  int reps = 5;
  unsigned threads = 2;
  std::string keep;
  std::vector<std::string> layouts(std::begin(kLayouts), std::end(kLayouts));
  app.add_option("--reps", reps, "requests per cell (medians are printed)");
  app.add_option("--threads", threads, "compute threads of epd's encoder and of every role");
  app.add_option("--keep", keep, "write the model pairs, images and clips into this directory and keep them");
  app.add_option("--layout", layouts, "only these layouts (repeatable; default: all)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kLayouts), std::end(kLayouts))));
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
    for (const std::string& layout : layouts) {
      uintmax_t lm = 0, mmproj = 0;
      for (auto& row : run_layout(layout, root / layout, reps, threads, memory, lm, mmproj))
        rows.push_back(row);
      char line[160];
      std::snprintf(line, sizeof line, "%s: lm.gguf %.1f MiB, mmproj.gguf %.1f MiB", layout.c_str(),
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
      "epd-bench vision: %ux%u images after /v1/generate's prompt \"%s\"; audio: %.0f s 16 kHz mono WAV\n"
      "clips (one 30 s chunk each) in an OpenAI chat, \"%s\"; 1 token, medians of %d requests; epd %u "
      "thread(s), llama.cpp (epd-mtmd-reference) 2\n\n",
      kSide, kSide, kText, kClipSeconds, kAudioText, reps, threads);
  std::printf("%-11s %5s | %-26s | %-28s | %s\n", "", "", "encode ms/item", "TTFT ms",
              "epd cluster stages ms");
  std::printf("%-11s %5s | %7s %7s %10s | %7s %8s %11s | %7s %8s %11s\n", "layout", "items", "llama", "epd",
              "epd/llama", "llama", "epd", "epd/llama", "encode", "prefill", "kv_transfer");
  for (const VisionRow& r : rows) {
    const double le = percentile(r.llama_encode, 50), ee = percentile(r.epd_encode, 50);
    const double lt = percentile(r.llama_ttft, 50), et = percentile(r.epd_ttft, 50);
    std::printf("%-11s %5zu | %7.1f %7.1f %9.2fx | %7.1f %8.1f %10.2fx | %7.1f %8.1f %11.2f\n",
                r.layout.c_str(), r.items, le, ee, ee / le, lt, et, et / lt, percentile(r.encode, 50),
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
