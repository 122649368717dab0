// A worker process of `epd-bench membership` (membership_fleet.hpp): a Simulation of some of the fleet's
// instances, driven by the bench's process over two pipes.
#include <malloc.h>

#include <cstdio>
#include <sstream>

#include <spdlog/cfg/env.h>
#include <spdlog/spdlog.h>

#include "membership_fleet.hpp"
#include "membership_sim.hpp"

namespace epd::bench {

namespace {

// A process of hundreds of simulated instances allocates and frees what hundreds of processes would, in
// one heap. glibc's defaults (an arena per thread up to 8 per core, free memory above 128 KB returned to
// the system at once) then make it give pages back and fault them in again all through a start: at 1,000
// on etcd, page faults were the largest item in these processes' profile. Fewer arenas and a heap that
// keeps what it freed cost a real instance nothing it has, so only packed workers get them, never a router's
// process (docs/architecture.md, "Fleet runs").
void tune_heap_for_packed_instances() {
  mallopt(M_ARENA_MAX, 2);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
}

}  // namespace

int run_membership_worker(const std::string& backend, const std::string& endpoint,
                          const MembershipOptions& opt, bool packed) {
  if (packed) tune_heap_for_packed_instances();
  auto side = make_member_side(backend, endpoint, opt);
  FILE* in = fdopen(3, "r");
  FILE* out = fdopen(4, "w");
  if (!side || !in || !out) {
    std::fprintf(stderr, "membership worker: unknown backend '%s' or no command pipes\n", backend.c_str());
    return 2;
  }
  // With etcd, every instance that never spoke to a killed one warns when it drops its record after the
  // grace period: one line per instance per kill.
  spdlog::set_level(backend.rfind("etcd", 0) == 0 ? spdlog::level::err : spdlog::level::warn);
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=info shows every join, resend and resync, for a diagnosis
  Simulation sim(opt, *side);
  auto reply = [&](const std::string& s) {
    std::fputs(s.c_str(), out);
    std::fputc('\n', out);
    std::fflush(out);
  };
  auto yes = [&](bool b) { reply(b ? "1" : "0"); };
  char buf[512];
  while (std::fgets(buf, sizeof buf, in)) {
    std::istringstream line(buf);
    std::string cmd, id, role;
    line >> cmd >> id;
    if (cmd == "add") {
      int router = 0;
      line >> role >> router;
      auto incarnation = sim.add(id, role, router != 0);
      reply(incarnation ? "ok " + std::to_string(*incarnation) : "err");
    } else if (cmd == "kill") {
      sim.kill(id);
    } else if (cmd == "rejoined") {
      // "<n> <id> <incarnation>...": one line, however many.
      const auto r = sim.rejoined();
      std::string s = std::to_string(r.size());
      for (const auto& [who, incarnation] : r) s += " " + who + " " + std::to_string(incarnation);
      reply(s);
    } else if (cmd == "expect") {
      uint64_t incarnation = 0;
      line >> incarnation;
      sim.expect(id, incarnation);
    } else if (cmd == "forget") {
      sim.forget(id);
    } else if (cmd == "recheck") {
      sim.recheck();
    } else if (cmd == "pending") {
      auto behind = sim.disagreeing();
      reply(behind ? *behind : "none");
    } else if (cmd == "describe") {
      reply(sim.describe(id));
    } else if (cmd == "routed") {
      yes(sim.routed_around(id));
    } else if (cmd == "unlisted") {
      yes(sim.unlisted_by_routers(id));
    } else if (cmd == "placeable") {
      yes(sim.placeable_everywhere(id));
    } else if (cmd == "all_placeable") {
      yes(sim.all_placeable_everywhere());
    } else if (cmd == "traffic") {
      const auto t = sim.traffic();
      const auto member = side->bytes_to_instances();
      const auto counters = side->counters();
      std::string s = std::to_string(t.bytes_in) + " " + std::to_string(t.bytes_out) + " " +
                      std::to_string(t.frames_out) + " " + (member ? std::to_string(*member) : "-") + " " +
                      std::to_string(counters.size());
      for (const auto& [name, v] : counters) s += " " + name + " " + std::to_string(v);
      reply(s);
    } else {
      std::fprintf(stderr, "membership worker: unknown command '%s'\n", cmd.c_str());
      return 2;
    }
  }
  return 0;  // the bench closed the pipe: the Simulation stops every instance as by kill -9
}

}  // namespace epd::bench
