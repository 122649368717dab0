// The epd-cluster executable against a fake bin dir — shell-script roles and a python3 router that
// serves GET /v1/instances, listing the instances that have "registered" (written a file) — and, secured
// with CURVE keys and an API key file, against the real roles.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.hpp"

using namespace epd::launcher::test;

namespace {

// A free loopback port: bind to 0 and read the port back (the fake router binds it right after).
int free_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

const char* kRouter = R"(#!/usr/bin/env python3
import http.server, json, os, sys
me = sys.argv[sys.argv.index("--id") + 1]
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
open(os.path.join(root, "pids", me), "w").write(str(os.getpid()))
open(os.path.join(root, "up", me), "w").write("")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/v1/instances":
            self.send_response(404); self.end_headers(); return
        ids = os.listdir(os.path.join(root, "up"))
        # A process's pid stands for its incarnation: a restarted instance has a new one.
        body = json.dumps([{"id": i, "healthy": True, "free_kv_pages": 1,
                            "incarnation": int(open(os.path.join(root, "pids", i)).read() or 0)}
                           for i in ids]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
server = http.server.HTTPServer(("127.0.0.1", PORT), H)
print("fake router listening", flush=True)
server.serve_forever()
)";

// A role: records its pid, "registers" unless told not to, then runs until signalled.
std::string role_script(bool registers) {
  return std::string("#!/bin/sh\n") +
         "while [ $# -gt 0 ]; do case \"$1\" in --id) id=$2; shift;; --role) role=$2; shift;; esac; shift; "
         "done\n"
         "root=$(dirname \"$(dirname \"$0\")\")\n"
         "echo $$ > \"$root/pids/$id\"\n" +
         (registers ? "touch \"$root/up/$id\"\n" : "") + "echo \"fake ${role:-own} $id up\"\nexec sleep 30\n";
}

std::string config_text(int port) {
  return "[cluster]\nname = \"test\"\nregistry = \"router\"\n\n"
         "[[instance]]\nid = \"router\"\nrole = \"router\"\ncontrol = \"tcp://127.0.0.1:17900\"\n"
         "http = \"127.0.0.1:" +
         std::to_string(port) +
         "\"\n\n"
         "[[instance]]\nid = \"encoder-0\"\nrole = \"encoder\"\ncontrol = \"tcp://127.0.0.1:17901\"\n\n"
         "[[instance]]\nid = \"prefill-0\"\nrole = \"prefill\"\ncontrol = \"tcp://127.0.0.1:17902\"\n\n"
         "[[instance]]\nid = \"decode-0\"\nrole = \"decode\"\ncontrol = \"tcp://127.0.0.1:17903\"\n";
}

// A fake install: bin/epd-router, bin/epd-encoder (own executable), bin/epd-role for the rest.
struct FakeCluster {
  TempDir dir;
  int port = free_port();
  std::filesystem::path config;

  explicit FakeCluster(bool decode_registers = true) {
    std::string router = kRouter;
    router.replace(router.find("PORT"), 4, std::to_string(port));
    dir.write("bin/epd-router", router, true);
    dir.write("bin/epd-encoder", role_script(true), true);
    dir.write("bin/epd-role", role_script(true), true);
    if (!decode_registers) dir.write("bin/epd-decode", role_script(false), true);
    std::filesystem::create_directories(dir.path / "up");
    std::filesystem::create_directories(dir.path / "pids");
    config = dir.write("cluster.toml", config_text(port));
  }
  std::vector<std::string> args(std::vector<std::string> extra = {}) {
    std::vector<std::string> a{
        EPD_CLUSTER_EXE, "--config", config.string(), "--bin-dir", (dir.path / "bin").string(),
        "--stop-grace",  "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  pid_t pid_of(const std::string& id) {
    std::ifstream in(dir.path / "pids" / id);
    pid_t p = 0;
    in >> p;
    return p;
  }
  std::vector<pid_t> pids() {
    std::vector<pid_t> out;
    for (const auto& e : std::filesystem::directory_iterator(dir.path / "pids")) {
      std::ifstream in(e.path());
      pid_t p = 0;
      if (in >> p) out.push_back(p);
    }
    return out;
  }
  // Test cleanup: nothing of this fake cluster may outlive the test, even when it failed.
  ~FakeCluster() {
    for (pid_t p : pids())
      if (!process_gone(p)) ::kill(p, SIGKILL);
  }
};

}  // namespace

TEST_CASE("epd-cluster starts every instance, reports ready, and stops them all on SIGTERM",
          "[launcher][multiproc]") {
  FakeCluster fc;
  Proc cluster(fc.args());
  REQUIRE(cluster.read_until("epd-cluster: ready (4 instances)\n", 10s));
  const auto& out = cluster.output();
  // The registry first, each role through its own executable or the generic runner.
  CHECK(out.find("[launcher] started router (pid ") < out.find("[launcher] started encoder-0 (pid "));
  CHECK(out.find("/bin/epd-encoder --config") != std::string::npos);
  CHECK(out.find("/bin/epd-role --role prefill --config") != std::string::npos);
  CHECK(out.find("[encoder-0] fake own encoder-0 up") != std::string::npos);
  CHECK(out.find("[decode-0] fake decode decode-0 up") != std::string::npos);
  CHECK(out.find("[router] fake router listening") != std::string::npos);
  auto pids = fc.pids();
  REQUIRE(pids.size() == 4);

  REQUIRE(::kill(cluster.pid(), SIGTERM) == 0);
  auto st = cluster.wait(8s);
  REQUIRE(st);
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
  cluster.read_all(1s);
  CHECK(cluster.output().find("epd-cluster: received SIGTERM; stopping") != std::string::npos);
  CHECK(cluster.output().find("[launcher] all children stopped") != std::string::npos);
  for (pid_t p : pids) CHECK(wait_gone(p, 2s));
}

TEST_CASE("epd-cluster restarts a killed instance and survives a closed stdout", "[launcher][multiproc]") {
  FakeCluster fc;
  Proc cluster(fc.args());
  REQUIRE(cluster.read_until("epd-cluster: ready (4 instances)\n", 10s));
  pid_t prefill = pid_after(cluster.output(), "[launcher] started prefill-0 (pid ");
  REQUIRE(prefill > 0);
  REQUIRE(::kill(prefill, SIGKILL) == 0);
  REQUIRE(cluster.read_until("[launcher] restarted prefill-0 (pid ", 5s));
  CHECK(cluster.output().find("prefill-0 (pid " + std::to_string(prefill) +
                              ") killed by signal 9 (SIGKILL); restarting in 200 ms (restart 1/5)") !=
        std::string::npos);

  // Nobody reads the launcher's output any more; it must keep running (no SIGPIPE) and stop cleanly.
  cluster.close_output();
  auto pids = fc.pids();
  ::kill(pids.front(), SIGKILL);  // more output to write into the closed pipe
  std::this_thread::sleep_for(300ms);
  REQUIRE(::kill(cluster.pid(), 0) == 0);
  REQUIRE(::kill(cluster.pid(), SIGINT) == 0);
  auto st = cluster.wait(8s);
  REQUIRE(st);
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
  for (pid_t p : fc.pids()) CHECK(wait_gone(p, 2s));
}

TEST_CASE("epd-cluster names the instances missing at the ready timeout, stops them, fails",
          "[launcher][multiproc]") {
  FakeCluster fc(/*decode_registers=*/false);
  // Long enough for python3 to start the fake router even on a loaded machine.
  Proc cluster(fc.args({"--ready-timeout", "4"}));
  auto st = cluster.wait(10s);
  REQUIRE(st);
  cluster.read_all(1s);
  INFO(cluster.output());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 1);
  CHECK(cluster.output().find("epd-cluster: not ready after 4 s; missing: decode-0; stopping") !=
        std::string::npos);
  CHECK(cluster.output().find("epd-cluster: ready") == std::string::npos);
  auto pids = fc.pids();
  CHECK(pids.size() == 4);
  for (pid_t p : pids) CHECK(wait_gone(p, 2s));
}

TEST_CASE("epd-cluster refuses to start without an executable for every role", "[launcher][multiproc]") {
  FakeCluster fc;
  std::filesystem::remove(fc.dir.path / "bin" / "epd-role");  // prefill and decode have nothing to run
  Proc cluster(fc.args());
  auto st = cluster.wait(5s);
  REQUIRE(st);
  cluster.read_all(1s);
  INFO(cluster.output());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 2);
  CHECK(cluster.output().find("epd-cluster: instance 'prefill-0' (role prefill): no executable: neither ") !=
        std::string::npos);
  CHECK(cluster.output().find("[launcher] started") == std::string::npos);
  CHECK(fc.pids().empty());
}

TEST_CASE("epd-cluster reports a broken or missing config and bad flags clearly", "[launcher][multiproc]") {
  FakeCluster fc;
  auto broken = fc.dir.write("broken.toml", "[cluster\nname = \n");
  Proc a({EPD_CLUSTER_EXE, "--config", broken.string(), "--bin-dir", (fc.dir.path / "bin").string()});
  auto sa = a.wait(5s);
  REQUIRE(sa);
  a.read_all(1s);
  INFO(a.output());
  CHECK(WEXITSTATUS(*sa) == 2);
  CHECK(a.output().find("epd-cluster: " + broken.string()) != std::string::npos);

  auto missing = fc.dir.path / "nope.toml";
  Proc b({EPD_CLUSTER_EXE, "--config", missing.string()});
  auto sb = b.wait(5s);
  REQUIRE(sb);
  b.read_all(1s);
  INFO(b.output());
  CHECK(WEXITSTATUS(*sb) == 2);
  CHECK(b.output().find(missing.string() + ": cannot open the config file") != std::string::npos);

  Proc c({EPD_CLUSTER_EXE, "--bin-dir", "/nowhere"});
  auto sc = c.wait(5s);
  REQUIRE(sc);
  c.read_all(1s);
  INFO(c.output());
  CHECK(WEXITSTATUS(*sc) == 2);
  CHECK(c.output().find("--config is required") != std::string::npos);
  CHECK(fc.pids().empty());
}

TEST_CASE("epd-cluster restarts every instance but the routers one at a time on SIGHUP",
          "[launcher][multiproc]") {
  FakeCluster fc;
  Proc cluster(fc.args());
  REQUIRE(cluster.read_until("epd-cluster: ready (4 instances)\n", 10s));
  const std::vector<std::string> rolled = {"encoder-0", "prefill-0", "decode-0"};
  std::map<std::string, pid_t> before;
  for (const auto& id : rolled) before[id] = fc.pid_of(id);
  const pid_t router = fc.pid_of("router");

  REQUIRE(::kill(cluster.pid(), SIGHUP) == 0);
  REQUIRE(cluster.read_until("rolling restart done: 3 instances in ", 20s));
  const std::string& out = cluster.output();
  CHECK(out.find("epd-cluster: received SIGHUP; restarting encoder-0, prefill-0, decode-0 one at a time") !=
        std::string::npos);
  // One at a time, in config order: each is back before the next one is stopped.
  size_t at = 0;
  for (const auto& id : rolled) {
    INFO(id << "\n" << out);
    const size_t stopped =
        out.find("[launcher] restarting " + id + " (pid " + std::to_string(before[id]), at);
    REQUIRE(stopped != std::string::npos);
    const size_t back = out.find("[launcher] rolling restart: " + id + " is back (pid ", stopped);
    REQUIRE(back != std::string::npos);
    at = back;
    CHECK(fc.pid_of(id) != before[id]);
    CHECK(process_gone(before[id]));
  }
  CHECK(fc.pid_of("router") == router);  // the router serves on

  REQUIRE(::kill(cluster.pid(), SIGTERM) == 0);
  auto st = cluster.wait(8s);
  REQUIRE(st);
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
}

// An operator secures configs/local.toml as docs/security.md says — CURVE keys from epd-keygen for every
// instance, an API key file on the router — and starts it with epd-cluster and the real roles: the
// launcher's readiness probe uses the router's own key, so the cluster is ready as an open one would be;
// a client with the key is served, one without is refused.
TEST_CASE("epd-cluster starts configs/local.toml secured with CURVE keys and an API key file",
          "[launcher][multiproc]") {
  TempDir dir;
  std::ifstream in(std::string(EPD_SOURCE_DIR) + "/configs/local.toml");
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  // Free ports for the example's fixed ones; the seeded reference model for the demo model's files.
  for (const std::string port :
       {"17100", "17101", "17102", "17103", "18100", "19100", "19101", "19102", "19103"})
    for (size_t at; (at = config.find("127.0.0.1:" + port)) != std::string::npos;)
      config.replace(at + 10, port.size(), std::to_string(free_port()));
  std::stringstream kept;
  std::istringstream lines(config);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("path = ", 0) != 0 && line.rfind("mmproj = ", 0) != 0) kept << line << "\n";
  config = kept.str();
  const size_t http = config.find("http = \"127.0.0.1:");
  REQUIRE(http != std::string::npos);
  const size_t port_at = http + std::string("http = \"127.0.0.1:").size();
  const int http_port = std::stoi(config.substr(port_at));
  config.insert(config.find('\n', http) + 1, "api_keys_file = \"api-keys.txt\"\n");
  config += "\n[security]\ncurve_keys = \"keys/cluster.pub\"\n";
  const auto file = dir.write("local.toml", config);
  const std::string key = "operator-key-0123456789abcdef";
  const auto keys_file = dir.write("api-keys.txt", "# the operator's clients\n" + key + "\n");
  std::filesystem::permissions(keys_file,
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  Proc keygen({EPD_KEYGEN_EXE, "--out", (dir.path / "keys").string(), "--id", "router", "--id", "encoder-0",
               "--id", "prefill-0", "--id", "decode-0"});
  auto made = keygen.wait(10s);
  REQUIRE(made);
  REQUIRE(WEXITSTATUS(*made) == 0);

  Proc cluster({EPD_CLUSTER_EXE, "--config", file.string(), "--stop-grace", "3"});
  const bool ready = cluster.read_until("epd-cluster: ready (4 instances)\n", 60s);
  INFO(cluster.output());
  REQUIRE(ready);
  httplib::Client client("127.0.0.1", http_port);
  client.set_read_timeout(30, 0);
  const nlohmann::json body = {{"prompt", "hello"}, {"max_tokens", 4}};
  auto refused = client.Post("/v1/completions", body.dump(), "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 401);
  client.set_bearer_token_auth(key);
  auto served = client.Post("/v1/completions", body.dump(), "application/json");
  REQUIRE(served);
  CHECK(served->status == 200);
  CHECK(nlohmann::json::parse(served->body)["usage"]["completion_tokens"].get<int>() >= 1);

  REQUIRE(::kill(cluster.pid(), SIGTERM) == 0);
  auto st = cluster.wait(15s);
  REQUIRE(st);
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
}
