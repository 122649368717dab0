#pragma once
// What a control channel on a hub offers the hub's thread, and what the hub offers it (channel_hub.hpp).
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "epd/transport/channel_hub.hpp"

namespace epd::transport {

namespace detail {

class HubMember {
 public:
  virtual ~HubMember() = default;
  // On the hub's thread: reads every socket of the channel and calls its handlers. When the channel's
  // sockets changed it first calls `watch` with the descriptors to poll from now on (while retired sockets
  // are still open, so the hub can stop polling them before their descriptors are reused). True when a
  // socket had more to read than one turn takes. `tick`: nothing signalled, the idle tick looks (what it
  // finds means a lost wake-up: counted as late reads).
  virtual bool service(const std::function<void(const std::vector<int>&)>& watch, bool tick) = 0;
};

}  // namespace detail

struct ChannelHub::Impl {
  HubConfig config;
  zmq::context_t ctx;
  // inproc addresses are per context: monitors of the hub's channels are numbered hub-wide.
  std::atomic<uint64_t> monitors{0};

  explicit Impl(const HubConfig& c);
  ~Impl();

  // A channel's sockets are polled from now on; its first service comes soon. Returns its key.
  uint64_t attach(detail::HubMember* member);
  // After this returns the hub never calls the member again (waits for a service under way, unless called
  // from within one on the hub's thread).
  void detach(uint64_t key);

  struct State;
  std::unique_ptr<State> state;
  std::thread thread;
  bool start();  // false: no epoll set or eventfd (errno says why)
  void loop();
};

}  // namespace epd::transport
