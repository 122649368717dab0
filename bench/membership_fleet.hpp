#pragma once
// The simulated fleet of `epd-bench membership`, spread over worker processes: each router in a process of
// its own (as a real one is), the other instances `MembershipOptions::per_process` to a process. Every
// worker is this executable again (`membership --worker`), running a Simulation and answering commands,
// one line each, on descriptors 3 (commands) and 4 (answers). What each instance sends and receives is
// real (its own sockets and TCP connections to the other processes); what it shares with the others in its
// process is the process, its two CAF threads and, by default, one ZeroMQ context and reading thread.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "membership_backend.hpp"

namespace epd::bench {

class Fleet {
 public:
  using clock = std::chrono::steady_clock;

  // `backend`: its name (make_member_side) and the endpoint its instances join.
  Fleet(const MembershipOptions& opt, std::string backend, std::string endpoint, int routers);
  ~Fleet();  // every worker told to stop (its instances die as by kill -9) and waited for
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  // Starts instances, in parallel across processes; the first `routers` ever started are routers. false
  // (said on stderr) when one could not start.
  bool add(const std::vector<std::string>& ids);
  bool add(const std::string& id) { return add(std::vector<std::string>{id}); }
  // As a kill -9 does: its sockets close, it says nothing, revokes nothing.
  void kill(const std::string& id);
  // Stops one process of instances that are not routers (SIGSTOP) for `d`, then resumes it, as a host that
  // stalls: its instances are silent meanwhile.
  struct Frozen {
    int instances = 0;                           // 0: no such process
    std::optional<bool> unlisted_before_resume;  // with routers: had they dropped one of them by then?
  };
  Frozen freeze(std::chrono::milliseconds d);
  // kill -9 of the process of the router started last, which every directory stops expecting; its id, or
  // nullopt with fewer than two routers.
  std::optional<std::string> kill_router();

  // Asks every process for its instances whose incarnation changed (an instance expired while stalled
  // rejoins as a new one) and expects them at it from then on; how many changed. Every poll of the fleet
  // does this first.
  int follow_rejoins();
  int rejoins() const { return rejoins_; }  // incarnation changes seen so far

  // Polls until every live instance lists exactly the live instances at their incarnations, calling
  // `each_poll` on every round (and once more at the end); the ms since `since`, nullopt after `limit`.
  std::optional<double> converge_ms(clock::time_point since, std::chrono::milliseconds limit,
                                    const std::function<void()>& each_poll = {});

  // No router would place on `id`: its entry is gone or unhealthy, or the router's directory holds it dead.
  bool routed_around(const std::string& id);
  // No router's directory lists `id` any more (its record is gone).
  bool unlisted_by_routers(const std::string& id);
  // Every router would place on `id`: a healthy entry of its live incarnation.
  bool placeable_everywhere(const std::string& id);
  // Every router would place on every live instance.
  bool all_placeable_everywhere();
  bool has_routers() const { return routers_ > 0; }
  size_t processes() const { return workers_.size(); }

  struct Traffic {
    uint64_t bytes_in = 0, bytes_out = 0, frames_out = 0;  // over every bridge, retired ones included
    std::optional<uint64_t> member_bytes;                  // MemberSide::bytes_to_instances, summed
    std::vector<std::pair<std::string, double>> counters;  // MemberSide::counters, summed
  };
  Traffic traffic();

 private:
  struct Worker {
    pid_t pid = -1;
    FILE* to = nullptr;    // commands
    FILE* from = nullptr;  // answers
    int members = 0;
    bool routers = false;  // holds a router
    bool dead = false;     // stopped answering
  };
  Worker* spawn(bool for_router);
  Worker* place(bool router);
  void tell(Worker& w, const std::string& line);
  void tell_all(const std::string& line);  // every worker, now (flushed)
  std::optional<std::string> answer(Worker& w);
  std::optional<std::string> ask(Worker& w, const std::string& line);
  bool ask_routers(const std::string& line);  // every router process answered "1"

  MembershipOptions opt_;
  std::string backend_, endpoint_;
  int routers_;
  int started_ = 0;
  int rejoins_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::map<std::string, std::pair<Worker*, uint64_t>> live_;  // id -> its process, its incarnation
};

// The worker's side: reads commands on descriptor 3 until it closes, answers on descriptor 4. `packed`: it
// holds many simulated instances (not a router), and its heap is set for that.
int run_membership_worker(const std::string& backend, const std::string& endpoint,
                          const MembershipOptions& opt, bool packed);

}  // namespace epd::bench
