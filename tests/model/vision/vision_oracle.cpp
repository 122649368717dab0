#include "vision_oracle.hpp"

#include <png.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace epd::model::testing {
namespace fs = std::filesystem;

std::vector<uint8_t> encode_png(const Image& image) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = image.width;
  png.height = image.height;
  png.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, image.rgb.data(), 0, nullptr))
    throw std::runtime_error("libpng cannot size the PNG");
  std::vector<uint8_t> out(size);
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, image.rgb.data(), 0, nullptr))
    throw std::runtime_error(std::string("libpng: ") + png.message);
  out.resize(size);
  return out;
}

void write_png_file(const fs::path& path, const Image& image) {
  const auto bytes = encode_png(image);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

namespace {

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

OracleRun run_mtmd_reference(const std::string& reference, const std::string& lm, const std::string& mmproj,
                             const std::vector<fs::path>& images, const std::string& prompt,
                             uint32_t n_predict, TokenId image_id, bool embeddings, int threads, bool f32_kv,
                             bool layout_only) {
  embeddings = embeddings && !layout_only;  // nothing is encoded
  const fs::path emb_file =
      fs::temp_directory_path() / ("epd-mtmd-emb-" + std::to_string(::getpid()) + ".bin");
  std::string cmd = "timeout 120 " + quoted(reference) + " --model " + quoted(lm) + " --mmproj " +
                    quoted(mmproj) + " --prompt " + quoted(prompt) + " -n " + std::to_string(n_predict) +
                    " --threads " + std::to_string(threads);
  for (const auto& f : images)
    cmd +=
        (f.extension() == ".wav" || f.extension() == ".mp3" ? " --audio " : " --image ") + quoted(f.string());
  if (embeddings) cmd += " --embeddings " + quoted(emb_file.string());
  if (f32_kv) cmd += " --kv-type f32";
  if (layout_only) cmd += " --layout-only";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run " + cmd);
  std::string out;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (::pclose(p) != 0) throw std::runtime_error("failed: " + cmd + "\n" + out);
  const auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error("not JSON from " + cmd + ": " + out.substr(0, 300));
  OracleRun run;
  for (const auto& chunk : j.at("layout")) {
    if (chunk.at("type") == "text") {
      for (const auto& id : chunk.at("tokens")) run.prompt.push_back(id.get<TokenId>());
    } else {
      const uint32_t rows = chunk.at("tokens").get<uint32_t>();
      run.prompt.insert(run.prompt.end(), rows, image_id);
      run.image_chunks.push_back(rows);
      if (chunk.contains("nx"))
        run.image_grids.emplace_back(chunk.at("nx").get<uint32_t>(), chunk.at("ny").get<uint32_t>());
    }
  }
  if (layout_only) return run;
  run.generated = j.at("generated").get<std::vector<TokenId>>();
  run.ttft_ms = j.value("ttft_us", 0.0) / 1000;
  for (const auto& us : j.value("encode_us", nlohmann::json::array()))
    run.encode_ms.push_back(us.get<double>() / 1000);
  if (embeddings) {
    std::ifstream in(emb_file, std::ios::binary);
    int32_t rows = 0, width = 0;
    in.read(reinterpret_cast<char*>(&rows), 4).read(reinterpret_cast<char*>(&width), 4);
    if (!in || rows < 0 || width <= 0) throw std::runtime_error("bad embeddings file from " + cmd);
    run.embedding_width = uint32_t(width);
    run.embeddings.resize(size_t(rows) * size_t(width));
    in.read(reinterpret_cast<char*>(run.embeddings.data()), std::streamsize(run.embeddings.size() * 4));
    if (!in) throw std::runtime_error("short embeddings file from " + cmd);
    fs::remove(emb_file);
  }
  return run;
}

}  // namespace epd::model::testing
