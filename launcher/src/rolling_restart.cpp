#include "epd/launcher/rolling_restart.hpp"

#include <thread>

#include "epd/launcher/exit_status.hpp"

namespace epd::launcher {

using Clock = std::chrono::steady_clock;
using protocol::ErrorCode;
using protocol::make_error;
using std::chrono::milliseconds;

namespace {

// The incarnation each router lists `id` under (0 where it is not listed healthy).
std::vector<uint64_t> incarnations_of(const std::vector<HostPort>& routers, const std::string& id) {
  std::vector<uint64_t> out;
  for (const auto& r : routers) {
    const auto seen = probe_instances(r, {id}, milliseconds(1000));
    const auto it = seen.incarnations.find(id);
    out.push_back(seen.ready() && it != seen.incarnations.end() ? it->second : 0);
  }
  return out;
}

}  // namespace

protocol::Status roll_instances(ProcessGroup& group, const std::vector<std::string>& ids,
                                const RollOptions& opts, OutputSink& sink) {
  const auto begin = Clock::now();
  sink.launcher_line("rolling restart of " + std::to_string(ids.size()) + " instances, one at a time");
  for (size_t n = 0; n < ids.size(); ++n) {
    const std::string& id = ids[n];
    if (opts.cancelled && opts.cancelled())
      return make_error(ErrorCode::aborted, "rolling restart cancelled");
    const auto before = incarnations_of(opts.routers, id);
    const auto start = Clock::now();
    auto pid = group.restart(id, opts.restart_timeout);
    if (!pid)
      return make_error(pid.error().code, "rolling restart stopped at " + id + ": " + pid.error().detail);
    // Back when every router lists it healthy under an incarnation it did not have before the restart.
    const auto deadline = Clock::now() + opts.healthy_timeout;
    for (;;) {
      const auto now_seen = incarnations_of(opts.routers, id);
      bool back = true;
      for (size_t r = 0; r < now_seen.size(); ++r)
        back = back && now_seen[r] != 0 && now_seen[r] != before[r];
      if (back) break;
      if (opts.cancelled && opts.cancelled())
        return make_error(ErrorCode::aborted, "rolling restart cancelled");
      if (Clock::now() >= deadline)
        return make_error(ErrorCode::timeout,
                          "rolling restart stopped at " + id + ": not healthy again within " +
                              describe_ms(opts.healthy_timeout.count()) + " of its restart");
      std::this_thread::sleep_for(milliseconds(50));
    }
    sink.launcher_line("rolling restart: " + id + " is back (pid " + std::to_string(*pid) + ", " +
                       std::to_string(n + 1) + "/" + std::to_string(ids.size()) + ") after " +
                       describe_ms(ms_between(start, Clock::now())));
  }
  sink.launcher_line("rolling restart done: " + std::to_string(ids.size()) + " instances in " +
                     describe_ms(ms_between(begin, Clock::now())));
  return {};
}

}  // namespace epd::launcher
