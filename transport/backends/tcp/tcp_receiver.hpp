#pragma once
// The receiving side of the tcp backend: one listener per engine, one thread per incoming lane. Every frame
// is checked (magic, size, token, range inside one registered region) before its payload is received straight
// into the region (after the fence table admitted it, for a fenced region); refused payloads are drained so
// the stream stays framed, and answered with a nack. A connection is unauthenticated until a frame carries
// the token: it must show it within kAuthDeadline, may be refused only a few frames before, and one source
// may hold only a few such connections (ConnectionGate).
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "connection_gate.hpp"
#include "epd/transport/fence.hpp"
#include "epd/transport/types.hpp"
#include "socket_util.hpp"

namespace epd::transport::tcp {

class Receiver {
 public:
  static Result<std::unique_ptr<Receiver>> start(const Endpoint& at, uint64_t token, std::string name,
                                                 std::shared_ptr<FenceTable> fences);
  // Stops accepting, shuts every connection down and joins every thread.
  ~Receiver();

  void add_region(uint64_t base, uint64_t length);
  const std::string& endpoint() const { return endpoint_; }
  // Every frame is checked against the current token: frames under the old one are refused from now on.
  void set_token(uint64_t token) { token_.store(token, std::memory_order_release); }
  // Connections refused at accept (too many unauthenticated from one source, or too many in all).
  uint64_t refused_connections() const { return gate_.refused(); }

 private:
  struct Conn {
    int fd = -1;
    std::string source;  // the peer's address, without the port
    bool authenticated = false;
    bool counts_unauthenticated = true;  // in the gate's per-source budget; only its own thread writes these
    std::thread thread;
    std::atomic<bool> done{false};
  };
  struct Span {
    uint64_t base, length;
  };

  Receiver(int listen_fd, int wake_fd, uint64_t token, std::string name, std::string endpoint,
           std::shared_ptr<FenceTable> fences);
  void accept_loop();
  void serve(Conn& conn);
  uint8_t* find(uint64_t addr, uint64_t len) const;
  void reap_finished();
  // Takes the connection out of its source's unauthenticated budget (once).
  void leave_unauthenticated(Conn& conn);

  const int listen_fd_;
  const int wake_fd_;  // eventfd: wakes accept_loop on shutdown
  std::atomic<uint64_t> token_;
  const std::string name_;
  const std::string endpoint_;
  const std::shared_ptr<FenceTable> fences_;  // may be null (no region fenced)
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex conns_mu_;
  std::list<Conn> conns_;
  ConnectionGate gate_{ConnectionGate::Limits{}};
  mutable std::shared_mutex regions_mu_;
  std::vector<Span> regions_;
};

}  // namespace epd::transport::tcp
