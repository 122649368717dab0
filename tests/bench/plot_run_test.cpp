// `epd-bench ... --plot DIR` for real: short runs of transfer, serve, e2e (staged) and soak each leave a PNG
// (with its script and data) in DIR; a DIR that cannot be made, a missing gnuplot and a --plot the bench
// cannot draw are refused before anything is measured. Also the transfer bench's row selection and goal
// lines, and the control-plane bench with its ZeroMQ baseline.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>

#include "cluster.hpp"
#include "temp_dir.hpp"

extern char** environ;

using namespace epd::testing;

namespace {

struct Run {
  int exit_code = -1;  // -1: killed or did not exit normally
  std::string output;  // stdout and stderr
};

// Runs build/bin/epd-bench with `args` (no shell), PATH replaced by `path` when given; killed after 90 s.
Run bench(const std::vector<std::string>& args, const std::string* path = nullptr) {
  std::vector<std::string> argv = {std::string(EPD_BIN_DIR) + "/epd-bench"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!path || std::strncmp(*e, "PATH=", 5) != 0) env.emplace_back(*e);
  if (path) env.push_back("PATH=" + *path);
  std::vector<char*> cenv;
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  REQUIRE(rc == 0);
  Run r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{out[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) == 0) {
      ::kill(pid, SIGTERM);  // epd-bench stops the cluster it started
      r.output += "\n[test: killed after 90 s]";
      break;
    }
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.output.append(buf, size_t(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// DIR holds NAME.png, NAME.gp and the data files the script names.
void check_plot(const std::filesystem::path& dir, const std::string& name) {
  INFO(name);
  CHECK(is_png(dir / (name + ".png")));
  const std::string script = read_file(dir / (name + ".gp"));
  CHECK(script.find("set output \"" + name + ".png\"") != std::string::npos);
  size_t data_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f.rfind(name, 0) != 0 || e.path().extension() != ".dat") continue;
    ++data_files;
    CHECK(script.find("\"" + f + "\"") != std::string::npos);
    CHECK(std::filesystem::file_size(e.path()) > 0);
  }
  CHECK(data_files > 0);
}

}  // namespace

TEST_CASE("epd-bench transfer --plot draws bandwidth vs block size with its baseline",
          "[bench][plot][multiproc]") {
  TempDir dir("plot-transfer");
  const auto plots = dir / "plots";
  const auto r =
      bench({"transfer", "--backend", "shm", "--quick", "--seconds", "0.05", "--plot", plots.string()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("plot: " + (plots / "transfer-bandwidth.png").string()) != std::string::npos);
  check_plot(plots, "transfer-bandwidth");
  // --backend shm: one panel, against memcpy.
  const std::string data = read_file(plots / "transfer-bandwidth.shm.dat");
  CHECK(data.find("# block_bytes batch_1 batch_16 memcpy") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(plots / "transfer-bandwidth.tcp.dat"));
}

TEST_CASE("epd-bench transfer runs only the rows --blocks and --batches name and prints the goals",
          "[bench][multiproc]") {
  const auto r =
      bench({"transfer", "--backend", "tcp", "--blocks", "64KiB", "--batches", "8", "--seconds", "0.05"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  size_t tcp_rows = 0;
  for (size_t at = r.output.find("\ntcp "); at != std::string::npos; at = r.output.find("\ntcp ", at + 1))
    ++tcp_rows;
  CHECK(tcp_rows == 1);
  CHECK(r.output.find("64KiB      8") != std::string::npos);
  CHECK(r.output.find("p50_us") != std::string::npos);
  CHECK(r.output.find("tcp / raw-tcp, blocks >= 64 KiB") != std::string::npos);
  CHECK(r.output.find("tcp p99 / p50 batch latency, blocks >= 64 KiB") != std::string::npos);
  // The bare round trip on the raw connection, with its latencies, and its tail next to the engine's.
  const auto rtt = r.output.find("\nraw-rtt     64KiB      1 ");
  REQUIRE(rtt != std::string::npos);
  const std::string rtt_row = r.output.substr(rtt + 1, r.output.find('\n', rtt + 1) - rtt - 1);
  CHECK(rtt_row.find(" - ") != std::string::npos);                            // a baseline row
  CHECK(rtt_row.substr(rtt_row.size() - 10).find('-') == std::string::npos);  // writes/s is a number
  CHECK(r.output.find("raw-rtt p99 / p50 round trip, blocks >= 64 KiB") != std::string::npos);
  CHECK(r.output.find("worst row 64KiB batch 8") != std::string::npos);

  for (const char* bad : {"12XB", "0", "", "KiB", "4,,8"}) {
    const auto refused = bench({"transfer", "--blocks", bad});
    INFO(bad << ": " << refused.output);
    CHECK(refused.exit_code == 2);
    CHECK(refused.output.find("usage: epd-bench transfer") != std::string::npos);
  }
}

TEST_CASE("epd-bench control-plane prints the handshake next to a bare ZeroMQ round trip",
          "[bench][multiproc]") {
  const auto r = bench({"control-plane", "--quick"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (const char* mode : {"plain ZMTP", "CURVE"}) CHECK(r.output.find(mode) != std::string::npos);
  size_t baselines = 0;
  for (size_t at = r.output.find("bare ZeroMQ DEALER -> ROUTER -> DEALER round trip");
       at != std::string::npos;
       at = r.output.find("bare ZeroMQ DEALER -> ROUTER -> DEALER round trip", at + 1))
    ++baselines;
  CHECK(baselines == 2);
  CHECK(r.output.find("handshake p50 / bare round trip p50") != std::string::npos);
  CHECK(bench({"control-plane", "--slow"}).exit_code == 2);
}

TEST_CASE("epd-bench --plot refuses a directory it cannot make and a missing gnuplot before measuring",
          "[bench][plot][multiproc]") {
  TempDir dir("plot-refused");
  std::ofstream(dir / "a-file") << "x";
  const auto bad = (dir / "a-file" / "plots").string();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"transfer", "--backend", "shm", "--quick", "--plot", bad},
        std::vector<std::string>{"soak", "--config", "no-such.toml", "--plot", bad},
        std::vector<std::string>{"serve", "--url", "http://127.0.0.1:1", "--plot", bad}}) {
    const auto r = bench(args);
    INFO(args[0] << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("epd-bench " + args[0] + ": --plot: cannot create plot directory " + bad) !=
          std::string::npos);
  }
  const std::string empty_path = dir.path().string();
  const auto r =
      bench({"transfer", "--backend", "shm", "--quick", "--plot", (dir / "p").string()}, &empty_path);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("gnuplot not found on PATH: install the Debian package gnuplot-nox") !=
        std::string::npos);
  CHECK(r.output.find("transfer bench:") == std::string::npos);  // nothing was measured

  const auto e2e = bench({"e2e", "--plot", (dir / "p").string()});
  INFO(e2e.output);
  CHECK(e2e.exit_code == 2);
  CHECK(e2e.output.find("give --staged-config") != std::string::npos);
}

TEST_CASE("epd-bench serve --plot draws the TTFT and ITL CDFs", "[bench][plot][multiproc]") {
  Cluster cluster(ClusterSpec{});
  cluster.start();
  TempDir dir("plot-serve");
  const auto r = bench({"serve", "--url", "http://127.0.0.1:" + std::to_string(cluster.http_port()),
                        "--requests", "30", "--rate", "100", "--max-concurrency", "8", "--prompt-len", "32",
                        "--output-len", "8", "--quiet", "--plot", dir.path().string()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  check_plot(dir.path(), "serve-latency-cdf");
  CHECK(std::filesystem::exists(dir / "serve-latency-cdf.itl.dat"));
  CHECK(std::filesystem::exists(dir / "serve-latency-cdf.router-ttft.dat"));
}

TEST_CASE("epd-bench soak --plot draws the RSS of every role per block", "[bench][plot][multiproc]") {
  Cluster cluster(ClusterSpec{});  // only its config (free ports): soak starts the cluster itself
  TempDir dir("plot-soak");
  const auto r = bench({"soak", "--config", cluster.config_file().string(), "--requests", "200", "--blocks",
                        "3", "--plot", dir.path().string()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  check_plot(dir.path(), "soak-rss");
  const std::string data = read_file(dir / "soak-rss.dat");
  CHECK(data.find("# block router_mib encoder-0_mib prefill-0_mib decode-0_mib") != std::string::npos);
}

TEST_CASE("epd-bench e2e --staged-config --plot draws the staging ring occupancy",
          "[bench][plot][multiproc]") {
  Cluster direct(ClusterSpec{});  // configs only: e2e starts each cluster itself
  ClusterSpec staged_spec;
  staged_spec.defaults["prefill"] = "chunk_tokens = 16\n";
  staged_spec.defaults["decode"] = "kv_page_size = 64\nstaging_ring_bytes = 16384\n";
  Cluster staged(staged_spec);
  TempDir dir("plot-e2e");
  const auto r = bench({"e2e", "--quick", "--no-control-plane", "--config", direct.config_file().string(),
                        "--staged-config", staged.config_file().string(), "--plot", dir.path().string()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  check_plot(dir.path(), "staging-ring");
  // Decode reported its 16 KiB ring while the staged run was sampled.
  CHECK(read_file(dir / "staging-ring.dat").find(" 16384 ") != std::string::npos);
}
