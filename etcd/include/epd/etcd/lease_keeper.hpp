#pragma once
// Keeps records alive in etcd, each under a lease of its own, for any number of owners from one thread:
// grants the lease, puts the record under it, renews it every TTL/3, and when etcd says the lease is gone
// (it expired while etcd was unreachable, or etcd lost it) grants a new one and puts the record again.
// Renewals due within a tenth of their period go together, as one batch on one gRPC LeaseKeepAlive stream,
// as etcd's own clients multiplex their leases on one stream; while that stream does not work (a way to
// etcd that speaks only HTTP/1.1) they go through the JSON gateway. Each round renews first, then
// registers new records for a bounded time, so a burst of joins never holds renewals back. An instance
// owns one record; a process of `epd-bench membership` keeps hundreds of simulated instances' records with
// one keeper (no thread and no connection per member). Never gives up: while etcd cannot be reached it
// retries every `retry`, and owners hear of it.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "epd/etcd/etcd_client.hpp"
#include "epd/etcd/lease_stream.hpp"

namespace epd::etcd {

class LeaseKeeper {
 public:
  // `registered`: the record is (again) in etcd, or etcd is reachable again and its lease still held; false:
  // etcd could not be reached (`detail` says how), said once per spell of trouble. Called on the keeper's
  // thread; it must not call the keeper.
  using News = std::function<void(bool registered, const std::string& detail)>;
  using Handle = uint64_t;

  explicit LeaseKeeper(EtcdClient client, std::chrono::milliseconds retry = std::chrono::milliseconds(500));
  ~LeaseKeeper();  // ends the thread; records still kept are left to their leases, as a crash leaves them

  // Starts keeping `value` at `key` under a lease of `ttl` (whole seconds, at least 1).
  Handle keep(std::string key, std::string value, std::chrono::milliseconds ttl, News news);
  // Stops keeping it. Waits out a call to etcd in flight for it (bounded by the client's timeout), so that
  // nothing is put after this returns; then revokes its lease when `revoke` (the key goes at once), or leaves
  // it to expire (a simulated kill -9).
  void release(Handle handle, bool revoke);

  // Records kept, and renewal batches sent (on the stream or through the gateway) so far.
  size_t size() const;
  uint64_t batches() const;

 private:
  struct Record;
  void run();
  // One round's calls, made outside the lock: the records are busy meanwhile.
  void register_records(const std::vector<Record*>& due);
  void renew_records(const std::vector<Record*>& due);
  // One renewal per lease: over the stream, or through the JSON gateway while the stream has not worked.
  std::vector<Result<int64_t>> renew(const std::vector<int64_t>& leases);

  EtcdClient client_;
  const std::chrono::milliseconds retry_;
  LeaseStream stream_;  // the thread's only, as are the three below
  bool stream_worked_ = false;
  int stream_failures_ = 0;  // before it first worked
  int gateway_left_ = 0;     // renewal batches through the gateway before the stream is tried again

  mutable std::mutex mu_;
  std::condition_variable changed_;  // a record added, released or settled; stopping
  std::map<Handle, Record> records_;
  Handle next_ = 1;
  uint64_t batches_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace epd::etcd
