// The embedded registry (the router's) as a membership backend: a bridge and the registry actor in a child
// process, nothing else, so its CPU time is its own. Instances run the registry client (spawn_membership).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "epd/actors/load_gauge.hpp"
#include "epd/actors/membership/membership.hpp"
#include "membership/registry.hpp"
#include "membership_backend.hpp"

namespace epd::bench {
namespace {

class RegistryClient final : public MemberLink {
 public:
  explicit RegistryClient(caf::actor a) : actor_(std::move(a)) {}
  void crash() override { caf::anon_send_exit(actor_, caf::exit_reason::kill); }

 private:
  caf::actor actor_;
};

class RegistryMemberSide final : public MemberSide {
 public:
  RegistryMemberSide(std::string endpoint, const MembershipOptions& opt)
      : endpoint_(std::move(endpoint)), opt_(opt) {}
  std::unique_ptr<MemberLink> join(caf::actor_system& system, actors::BridgePtr bridge,
                                   const std::string& role, std::shared_ptr<actors::RegistryView>) override {
    actors::MembershipConfig mc;
    mc.registry_endpoint = endpoint_;
    mc.role = role;
    mc.heartbeat_interval = opt_.interval;
    mc.heartbeat_misses = opt_.misses;
    return std::make_unique<RegistryClient>(
        actors::spawn_membership(system, std::move(bridge), mc, std::make_shared<actors::LoadGauge>(), {}));
  }
  std::vector<std::string> router_endpoints() const override { return {endpoint_}; }

 private:
  std::string endpoint_;
  MembershipOptions opt_;
};

// `full_lists` selects the behaviour before PEERS deltas, as the baseline.
class EmbeddedRegistry final : public RegistryBackend {
 public:
  explicit EmbeddedRegistry(bool full_lists) : full_lists_(full_lists) {}
  ~EmbeddedRegistry() override { stop(); }

  std::string describe() const override {
    return full_lists_ ? "embedded registry, full PEERS lists (before)" : "embedded registry, PEERS deltas";
  }

  bool start(const MembershipOptions& opt) override {
    opt_ = opt;
    std::fflush(stdout);  // the child must not print the parent's buffered lines again
    int to_parent[2], from_parent[2];
    if (pipe(to_parent) != 0 || pipe(from_parent) != 0) return false;
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      close(to_parent[0]);
      close(from_parent[1]);
      _exit(child_main(to_parent[1], from_parent[0]));
    }
    close(to_parent[1]);
    close(from_parent[0]);
    control_ = from_parent[1];
    char buf[256];
    const ssize_t n = read(to_parent[0], buf, sizeof buf);
    close(to_parent[0]);
    if (n <= 0) return false;
    endpoint_.assign(buf, size_t(n));
    return true;
  }

  double cpu_seconds() const override { return process_cpu_seconds(pid_); }

  void stop() override {
    if (pid_ <= 0) return;
    close(control_);  // the child exits when its end of the pipe reads EOF
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::string member_endpoint() const override { return endpoint_; }

 private:
  int child_main(int report_fd, int control_fd) {
    auto bridge = actors::Bridge::start("registry", actors::fresh_incarnation(), "tcp://127.0.0.1:*", {},
                                        actors::LivenessConfig{opt_.interval, opt_.misses, true});
    if (!bridge) {
      std::fprintf(stderr, "registry: %s\n", bridge.error().to_string().c_str());
      return 1;
    }
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 1);
    caf::actor_system system{cfg};
    actors::RegistryConfig rc;
    rc.heartbeat_interval = opt_.interval;
    rc.misses = opt_.misses;
    rc.full_lists = full_lists_;
    auto registry =
        actors::spawn_registry(system, bridge.value(), rc, std::make_shared<actors::RegistryView>());
    bridge.value()->wired();
    const std::string ep = bridge.value()->endpoint();
    if (write(report_fd, ep.data(), ep.size()) != ssize_t(ep.size())) return 1;
    close(report_fd);
    char c;
    while (read(control_fd, &c, 1) > 0) {
    }
    caf::anon_send_exit(registry, caf::exit_reason::user_shutdown);
    bridge.value()->stop();
    return 0;
  }

  bool full_lists_;
  MembershipOptions opt_;
  pid_t pid_ = -1;
  int control_ = -1;
  std::string endpoint_;
};

}  // namespace

std::unique_ptr<RegistryBackend> make_embedded_backend(bool full_lists) {
  return std::make_unique<EmbeddedRegistry>(full_lists);
}

std::unique_ptr<MemberSide> make_registry_member_side(const std::string& endpoint,
                                                      const MembershipOptions& opt) {
  return std::make_unique<RegistryMemberSide>(endpoint, opt);
}

double process_cpu_seconds(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream rest(line.substr(close_paren + 2));
  std::string field;
  double ticks = 0;
  // Fields 3.. after the name; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i >= 14) ticks += std::stod(field);
  return ticks / double(sysconf(_SC_CLK_TCK));
}

}  // namespace epd::bench
