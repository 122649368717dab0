#pragma once
// One ZeroMQ context and one I/O thread shared by many control channels of one process. A real instance
// has one channel and gives it its own context and thread; `epd-bench membership` runs thousands of
// simulated instances in one process, and a thread per channel would measure the host's scheduler rather
// than the protocol. Each channel keeps its own sockets (its ROUTER, its outbound ROUTER, their connections),
// so what goes over the wire is what real instances send; only the threads that read them are shared. Not for
// CURVE channels: ZeroMQ allows one ZAP handler per context.
#include <chrono>
#include <memory>

#include "epd/transport/types.hpp"

namespace epd::transport {

namespace detail {
class HubMember;
}

struct HubConfig {
  int io_threads = 2;         // ZeroMQ's own I/O threads, which move the bytes of every socket
  int max_sockets = 1 << 16;  // each channel holds up to five sockets (ROUTERs, monitors, ZAP)
  // Every channel's sockets are looked at this often even without a signal: a safety net for a lost
  // wake-up (a standalone channel does it every 200 ms; thousands of channels make that a cost).
  std::chrono::milliseconds idle_tick{1000};
};

class ChannelHub {
 public:
  static Result<std::shared_ptr<ChannelHub>> start(HubConfig config = {});
  ~ChannelHub();  // every channel on it has stopped (each holds the hub)
  ChannelHub(const ChannelHub&) = delete;
  ChannelHub& operator=(const ChannelHub&) = delete;

  size_t channels() const;

  // For the control channel (control_channel.cpp).
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit ChannelHub(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epd::transport
