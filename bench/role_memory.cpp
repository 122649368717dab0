#include "role_memory.hpp"

#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cluster.hpp"
#include "epd/config/cluster_config.hpp"
#include "epd/launcher/free_port.hpp"
#include "epd/model/quantize.hpp"

namespace epd::bench {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// kB of PSS over the mappings `counts(path)` selects, and of the whole process.
std::pair<double, double> pss_kb(pid_t pid, const std::function<bool(const std::string&)>& counts) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  double selected = 0, total = 0;
  bool in_selected = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') != std::string::npos &&
        line.find(':') != std::string::npos && line.find(' ') < line.find(':') + 8) {
      // "start-end perms offset dev inode [path]": a new mapping
      std::istringstream f(line);
      std::string range, perms, offset, dev, inode, path;
      f >> range >> perms >> offset >> dev >> inode;
      std::getline(f, path);
      path.erase(0, path.find_first_not_of(' '));
      in_selected = !path.empty() && counts(path);
      continue;
    }
    if (line.rfind("Pss:", 0) == 0) {
      const double kb = std::stod(line.substr(4));
      total += kb;
      if (in_selected) selected += kb;
    }
  }
  return {selected, total};
}

// The roles of the cluster started from `config`: processes whose command line names it.
std::vector<std::pair<pid_t, std::string>> role_processes(const std::string& config) {
  std::vector<std::pair<pid_t, std::string>> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_file(e.path() / "cmdline");
    std::vector<std::string> args;
    for (size_t at = 0; at < cmd.size();) {
      const size_t end = cmd.find('\0', at);
      args.push_back(cmd.substr(at, end - at));
      at = end == std::string::npos ? cmd.size() : end + 1;
    }
    bool ours = false;
    std::string id;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--config" && args[i + 1] == config) ours = true;
      if (args[i] == "--id") id = args[i + 1];
    }
    if (ours && !id.empty()) out.emplace_back(std::stoi(name), id);
  }
  return out;
}

}  // namespace

std::optional<std::vector<RoleMemory>> measure_role_memory(const std::string& model_path, unsigned threads) {
  const fs::path dir = fs::temp_directory_path() / ("epd-bench-memory-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string config = (dir / "cluster.toml").string();
  const int http = launcher::free_port();
  std::ofstream(config) << "[cluster]\nname = \"memory\"\nregistry = \"router\"\n\n[model]\npath = \""
                        << fs::absolute(model_path).string() << "\"\nthreads = " << threads
                        << "\n\n[transport]\nbackend = \"shm\"\nhost = \"127.0.0.1\"\n\n"
                        << "[defaults.prefill]\nkv_pages = 128\n\n[defaults.decode]\nkv_pages = 128\n\n";
  {
    std::ofstream out(config, std::ios::app);
    const char* roles[] = {"router", "encoder", "prefill", "decode"};
    for (const char* role : roles) {
      out << "[[instance]]\nid = \"" << role << "\"\nrole = \"" << role
          << "\"\ncontrol = \"tcp://127.0.0.1:" << launcher::free_port() << "\"\n";
      if (std::string(role) == "router") out << "http = \"127.0.0.1:" << http << "\"\n";
      out << "\n";
    }
  }
  auto cluster = start_cluster(config, "127.0.0.1", http, 3);
  if (!cluster) {
    fs::remove_all(dir);
    return std::nullopt;
  }
  httplib::Client c("127.0.0.1", http);
  c.set_read_timeout(std::chrono::seconds(120));
  std::vector<uint32_t> prompt(64);
  for (uint32_t i = 0; i < prompt.size(); ++i) prompt[i] = 1 + i * 7 % 200;
  auto r = c.Post("/v1/generate", nlohmann::json{{"prompt_tokens", prompt}, {"max_tokens", 8}}.dump(),
                  "application/json");
  std::optional<std::vector<RoleMemory>> out;
  if (!r || r->status != 200) {
    std::fprintf(stderr, "epd-bench model: the cluster did not answer: %s\n",
                 r ? r->body.c_str() : "no reply");
  } else {
    std::error_code ec;
    const std::string model = fs::canonical(model_path, ec).string();
    const std::string cache_dir = model::packed_weights_dir();
    const std::string cache = cache_dir.empty() ? "" : fs::weakly_canonical(cache_dir, ec).string();
    out.emplace();
    for (const auto& [pid, id] : role_processes(config)) {
      const auto [weights, total] = pss_kb(pid, [&](const std::string& path) {
        return path == model || (!cache.empty() && path.rfind(cache + "/packed-", 0) == 0);
      });
      out->push_back({id, id, weights / 1024, total / 1024});
    }
  }
  cluster->stop();
  fs::remove_all(dir);
  return out;
}

}  // namespace epd::bench
