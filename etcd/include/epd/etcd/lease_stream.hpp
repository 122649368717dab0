#pragma once
// Lease renewals the way etcd's own clients make them: over one gRPC LeaseKeepAlive stream (HTTP/2 in
// cleartext on the client port), a renewal being one small frame each way. Through the JSON gateway every
// renewal is an HTTP request that etcd turns into a gRPC stream of its own, and that costs etcd 0.7-1.0 ms
// of CPU (measured: 40 % of a core for 1,000 instances renewing every 1.7 s). Blocking and bounded by the
// timeout, like EtcdClient; not thread-safe: a LeaseKeeper's thread owns it.
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "epd/etcd/endpoint.hpp"
#include "epd/etcd/etcd_client.hpp"
#include "epd/protocol/result.hpp"

namespace epd::etcd {

class LeaseStream {
 public:
  LeaseStream(std::vector<Endpoint> endpoints, std::chrono::milliseconds timeout,
              std::shared_ptr<Traffic> traffic = nullptr);
  ~LeaseStream();
  LeaseStream(LeaseStream&&) noexcept;
  LeaseStream& operator=(LeaseStream&&) noexcept;

  // The seconds the lease has left after this renewal; 0 when etcd no longer knows it (it expired). Opens
  // the stream when none is open, on the first endpoint that accepts, starting from the one used last.
  // Errors: peer_unreachable (no endpoint accepted), timeout (no answer in time), io_error (the connection
  // broke, or etcd closed the stream), invalid_request (etcd ended the stream with a gRPC error),
  // malformed_body (the server does not speak HTTP/2, or sent what no renewal asked for). After any error
  // the stream is closed, and the next call opens a new one, on the next endpoint.
  Result<int64_t> keep_alive(int64_t lease);
  // Many leases at once (a process keeping many records alive): every request goes out before the first
  // answer is read, and etcd answers them in order. The TTLs left, one per lease; the same errors, for all.
  Result<std::vector<int64_t>> keep_alive(const std::vector<int64_t>& leases);

  // Streams opened so far (1 for a stream that never broke).
  uint64_t opened() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace epd::etcd
