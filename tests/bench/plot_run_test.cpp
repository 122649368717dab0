// `epd-bench ... --plot DIR` for real: short runs of transfer, serve, e2e (staged) and soak each leave a PNG
// (with its script and data) in DIR; a DIR that cannot be made, a missing gnuplot and a --plot the bench
// cannot draw are refused before anything is measured. Also the transfer bench's row selection and goal
// lines, and the control-plane bench with its ZeroMQ baseline. serve's conversations (--turns): the history
// each turn carries, what is counted, the context check, and --compare's plot.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cluster.hpp"
#include "recording_server.hpp"
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

namespace serve_turns_test {

// The rows of epd-bench serve's --csv, split at commas (no field of an answered request holds one).
std::vector<std::vector<std::string>> csv_rows(const std::filesystem::path& file) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(read_file(file));
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    rows.emplace_back();
    std::istringstream fields(line);
    for (std::string f; std::getline(fields, f, ',');) rows.back().push_back(f);
  }
  return rows;
}

constexpr size_t kOutputTokens = 10, kPromptTokens = 11, kPromptChars = 12, kConversation = 16, kTurn = 17,
                 kAnswerBytes = 18;

// Every request the recorder saw belongs to a conversation whose earlier answers it carries exactly as the
// recorder streamed them: the assistant message after k user turns is the answer to the request that held
// exactly those messages before it. Returns the number of requests per turn count.
std::map<size_t, size_t> check_histories(const std::vector<epd::testing::RecordingServer::Request>& seen) {
  std::map<std::string, std::string> answer_to;  // messages (JSON) -> what the recorder answered
  for (const auto& r : seen) answer_to[r.messages.dump()] = r.answer;
  std::map<size_t, size_t> by_turns;
  for (const auto& r : seen) {
    const auto& m = r.messages;
    size_t users = 0;
    for (size_t i = 0; i < m.size(); ++i) {
      if (m[i]["role"] == "user") ++users;
      if (m[i]["role"] != "assistant") continue;
      const auto before = nlohmann::json(std::vector<nlohmann::json>(m.begin(), m.begin() + long(i)));
      INFO(m.dump());
      REQUIRE(answer_to.count(before.dump()) == 1);
      CHECK(m[i]["content"] == answer_to[before.dump()]);
    }
    CHECK(m.back()["role"] == "user");
    CHECK(size_t(std::count_if(m.begin(), m.end(), [](const auto& x) { return x["role"] == "assistant"; })) ==
          users - 1);  // every answer before this turn
    ++by_turns[users];
  }
  return by_turns;
}

}  // namespace serve_turns_test

TEST_CASE("epd-bench serve --turns resends each conversation's history with the answers as streamed",
          "[bench][serve][multiproc]") {
  using namespace serve_turns_test;
  epd::testing::RecordingServer recorder;
  TempDir dir("serve-turns");
  const auto r = bench({"serve", "--url", recorder.url(), "--turns", "3", "--requests", "12",
                        "--max-concurrency", "2", "--system-len", "20", "--prompt-len", "16", "--quiet",
                        "--csv", (dir / "r.csv").string(), "--json", (dir / "r.json").string()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto seen = recorder.requests();
  REQUIRE(seen.size() == 12);
  // 4 conversations of 3 turns: a system prompt shared by all, then 1, 2 and 3 user turns.
  CHECK(check_histories(seen) == std::map<size_t, size_t>{{1, 4}, {2, 4}, {3, 4}});
  for (const auto& s : seen) CHECK(s.messages[0] == seen[0].messages[0]);
  CHECK(seen[0].messages[0]["role"] == "system");
  CHECK(seen[0].messages[0]["content"].get<std::string>().size() == 20);

  // Counted per turn: every request answered, its prompt tokens (10 a message at the recorder) by turn.
  const auto j = nlohmann::json::parse(read_file(dir / "r.json"));
  const auto& s = j["summary"];
  CHECK(s["sent"] == 12);
  CHECK(s["ok"] == 12);
  CHECK(s["conversations"] == 4);
  REQUIRE(s["ttft_ms_by_turn"].size() == 3);
  for (const auto& t : s["ttft_ms_by_turn"]) CHECK(t["n"] == 4);
  CHECK(s["prompt_tokens_mean_by_turn"] == nlohmann::json::array({20.0, 40.0, 60.0}));
  CHECK(r.output.find("4 conversations of 3 turns") != std::string::npos);
  const auto rows = csv_rows(dir / "r.csv");
  REQUIRE(rows.size() == 12);
  std::map<std::string, std::vector<int>> turns;  // conversation -> its turns in the order they were sent
  for (const auto& row : rows) {
    REQUIRE(row.size() == 19);
    turns[row[kConversation]].push_back(std::stoi(row[kTurn]));
    CHECK(std::stoi(row[kPromptTokens]) == 20 + 20 * std::stoi(row[kTurn]));
  }
  CHECK(turns.size() == 4);
  for (const auto& [conversation, t] : turns) CHECK(t == std::vector<int>{0, 1, 2});
}

TEST_CASE("epd-bench serve --turns on a real cluster: each turn's prompt holds the turn before it",
          "[bench][serve][multiproc]") {
  using namespace serve_turns_test;
  Cluster cluster(ClusterSpec{});
  cluster.start();
  TempDir dir("serve-turns-cluster");
  const auto r =
      bench({"serve", "--url", "http://127.0.0.1:" + std::to_string(cluster.http_port()), "--turns", "3",
             "--requests", "9", "--max-concurrency", "3", "--system-len", "40", "--prompt-len", "20",
             "--output-len", "8", "--quiet", "--csv", (dir / "r.csv").string()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto rows = csv_rows(dir / "r.csv");
  REQUIRE(rows.size() == 9);
  std::map<std::string, std::map<int, std::vector<std::string>>> by_conversation;
  for (const auto& row : rows) by_conversation[row[kConversation]][std::stoi(row[kTurn])] = row;
  REQUIRE(by_conversation.size() == 3);
  // The reference model's tokens are bytes: what a turn adds to the prompt the router counted is the new
  // message, the answer before it as streamed and the template's markers around them, the same every turn.
  std::set<int> template_bytes;
  for (const auto& [c, turns] : by_conversation) {
    REQUIRE(turns.size() == 3);
    for (int t = 1; t < 3; ++t) {
      const auto& before = turns.at(t - 1);
      const auto& now = turns.at(t);
      CHECK(std::stoi(before[kOutputTokens]) > 0);
      CHECK(std::stoi(before[kAnswerBytes]) > 0);
      template_bytes.insert(std::stoi(now[kPromptTokens]) - std::stoi(before[kPromptTokens]) -
                            std::stoi(now[kPromptChars]) - std::stoi(before[kAnswerBytes]));
    }
  }
  CHECK(template_bytes.size() == 1);
  CHECK(*template_bytes.begin() > 0);
}

TEST_CASE("epd-bench serve --turns refuses conversations the model's context cannot hold",
          "[bench][serve][multiproc]") {
  // The demo model's max_seq is 256.
  const std::string config = std::string(EPD_SOURCE_DIR) + "/configs/local.toml";
  const auto r = bench({"serve", "--config", config, "--turns", "8", "--system-len", "120", "--quiet"});
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--turns 8: ") != std::string::npos);
  CHECK(r.output.find("more than the model's max_seq 256") != std::string::npos);
  CHECK(r.output.find("epd-bench serve:") == std::string::npos);  // nothing was started or sent
}

TEST_CASE("epd-bench serve --compare --turns --plot draws both servers per concurrency level",
          "[bench][plot][serve][multiproc]") {
  using namespace serve_turns_test;
  Cluster cluster(ClusterSpec{});          // only its config: the bench starts the cluster itself
  epd::testing::RecordingServer recorder;  // stands in for a running llama-server
  TempDir dir("plot-compare");
  const auto r = bench({"serve", "--config", cluster.config_file().string(), "--compare", "llama-server",
                        "--compare-url", recorder.url(), "--concurrency", "1,2", "--turns", "2", "--requests",
                        "4", "--system-len", "16", "--quiet", "--plot", dir.path().string()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  check_plot(dir.path(), "serve-compare");
  for (const char* panel : {"throughput", "ttft", "itl", "e2e", "rss"}) {
    const auto data = read_file(dir / (std::string("serve-compare.") + panel + ".dat"));
    INFO(panel << ":\n" << data);
    size_t rows = 0;
    std::istringstream in(data);
    for (std::string line; std::getline(in, line);) rows += !line.empty() && line[0] != '#';
    CHECK(rows == 2);
  }
  // Both levels ran 2 conversations of 2 turns against each server.
  CHECK(check_histories(recorder.requests()) == std::map<size_t, size_t>{{1, 4}, {2, 4}});
  size_t turn_lines = 0;
  for (size_t at = r.output.find("2 conversations of 2 turns"); at != std::string::npos;
       at = r.output.find("2 conversations of 2 turns", at + 1))
    ++turn_lines;
  CHECK(turn_lines == 4);  // each level, each server
  CHECK(r.output.find("llama-server not measured") != std::string::npos);
}
