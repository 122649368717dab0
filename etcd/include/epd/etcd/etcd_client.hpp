#pragma once
// An etcd v3 client over etcd's JSON gRPC-gateway: the same protobuf API as gRPC, as JSON POSTs on the
// client port (keys and values base64, 64-bit numbers as strings). Every call is blocking and bounded by
// `timeout`. Unary calls reuse kept-alive connections (a small pool per endpoint, shared by the client's
// copies), so one client may be used from several threads; a watch has a connection of its own. Endpoints are
// tried in turn: a call that cannot reach one (or gets "unavailable") moves on to the next, and the next
// call starts from the endpoint that answered last.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "epd/etcd/endpoint.hpp"
#include "epd/protocol/result.hpp"

namespace epd::etcd {

using protocol::Result;
using protocol::Status;

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct RangeResult {
  std::vector<KeyValue> kvs;
  int64_t revision = 0;  // the store's revision the listing was taken at
};

struct Lease {
  int64_t id = 0;
  int64_t ttl_s = 0;
};

struct WatchEvent {
  enum class Type { put, del };
  Type type = Type::put;
  KeyValue kv;  // a delete carries only the key and its mod_revision
};

// Why watch_prefix returned.
struct WatchEnd {
  enum class Why { stopped, compacted, failed };
  Why why = Why::failed;
  int64_t compact_revision = 0;  // compacted: the oldest revision still available
  std::string error;             // failed: what went wrong
  int64_t last_revision = 0;     // the newest store revision a response of this watch carried
};

// What etcd's answers cost the client (epd-bench membership counts it): response bodies as received, HTTP
// headers and chunk framing left out. Shared by every copy of a client; may be shared by many clients.
struct Traffic {
  std::atomic<uint64_t> calls{0};  // unary calls answered (grant, renewals, puts, listings...), and renewals
                                   // answered on a LeaseStream
  std::atomic<uint64_t> connections{0};   // connections the unary calls (and LeaseStreams) opened, kept alive
  std::atomic<uint64_t> call_bytes{0};    // their bodies
  std::atomic<uint64_t> range_bytes{0};   // of which listings (range_prefix)
  std::atomic<uint64_t> watch_bytes{0};   // watch stream lines (one JSON response each, newline included)
  std::atomic<uint64_t> watch_events{0};  // events in them
};

struct ClientOptions {
  std::vector<std::string> endpoints;  // http://HOST:PORT
  std::chrono::milliseconds timeout{2000};
  std::shared_ptr<Traffic> traffic{};  // may be null
};

class EtcdClient {
 public:
  // Fails (config_error) when the list is empty or an endpoint is not http://HOST:PORT.
  static Result<EtcdClient> create(ClientOptions options);

  Result<Lease> grant(std::chrono::seconds ttl) const;
  // The seconds the lease has left after this renewal; 0 when etcd no longer knows it (it expired).
  Result<int64_t> keep_alive(int64_t lease) const;
  Status revoke(int64_t lease) const;
  // The store's revision after the write.
  Result<int64_t> put(const std::string& key, const std::string& value, int64_t lease = 0) const;
  Result<int64_t> erase(const std::string& key) const;
  Result<RangeResult> range_prefix(const std::string& prefix) const;
  // Drops the history before `revision` (watches from older revisions then end as compacted).
  Status compact(int64_t revision) const;

  // Streams the changes of every key under `prefix` from `start_revision` on: `on_events` gets each
  // response's events with its header revision. Blocks until `stop` is set (checked every 100 ms), the
  // revision is compacted, the stream breaks, or nothing arrives for `idle_timeout` (etcd may be stopped or
  // cut off: the caller watches again, from the next revision, on the next endpoint).
  WatchEnd watch_prefix(const std::string& prefix, int64_t start_revision,
                        const std::function<void(std::vector<WatchEvent>, int64_t revision)>& on_events,
                        const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) const;

  // The endpoint the next call tries first.
  std::string current_endpoint() const;
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::shared_ptr<Traffic>& traffic() const { return traffic_; }

 private:
  EtcdClient(std::vector<Endpoint> endpoints, std::chrono::milliseconds timeout,
             std::shared_ptr<Traffic> traffic);
  // POSTs `body` to `path` on each endpoint in turn; the parsed JSON answer of the first that answers
  // (an etcd error object becomes an error naming etcd's message).
  Result<std::string> call(const std::string& path, const std::string& body) const;

  std::vector<Endpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  // Shared by copies (moves of the client keep it); the index of the endpoint that answered last.
  std::shared_ptr<std::atomic<size_t>> current_;
  struct Pools;  // kept-alive connections, one pool per endpoint; shared by copies
  std::shared_ptr<Pools> pools_;
  std::shared_ptr<Traffic> traffic_;  // may be null
};

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(const std::string& prefix);

}  // namespace epd::etcd
