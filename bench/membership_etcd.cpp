// etcd as a membership backend: a real etcd-server child, and every simulated instance runs the etcd
// membership actor (a leased record, a watch of the prefix, in-band heartbeats to the routers). The first
// two instances are routers, since only routers keep a load view.
#include <cstdio>

#include "epd/actors/membership/etcd_membership.hpp"
#include "epd/protocol/compat.hpp"
#include "local_etcd_run.hpp"
#include "membership_backend.hpp"

namespace epd::bench {
namespace {

class EtcdMember final : public MemberLink {
 public:
  explicit EtcdMember(std::unique_ptr<actors::EtcdMembership> m) : m_(std::move(m)) {}
  void crash() override {
    caf::anon_send_exit(m_->actor(), caf::exit_reason::kill);  // heartbeats end now, not after the threads
    m_->abandon();
  }

 private:
  std::unique_ptr<actors::EtcdMembership> m_;
};

class EtcdMemberSide final : public MemberSide {
 public:
  EtcdMemberSide(bool routers_watch, std::string endpoint, const MembershipOptions& opt)
      : routers_watch_(routers_watch), endpoint_(std::move(endpoint)), opt_(opt) {}

  std::unique_ptr<MemberLink> join(caf::actor_system& system, actors::BridgePtr bridge,
                                   const std::string& role,
                                   std::shared_ptr<actors::RegistryView> view) override {
    actors::EtcdMembershipConfig ec;
    ec.endpoints = {endpoint_};
    ec.prefix = "/epd/bench/";
    ec.lease_ttl = opt_.lease_ttl;
    ec.heartbeat_interval = opt_.interval;
    ec.heartbeat_misses = opt_.misses;
    ec.self.instance_id = bridge->instance_id();
    ec.self.role = role;
    ec.self.control_endpoint = bridge->endpoint();
    ec.self.incarnation = bridge->incarnation();
    ec.self.identity = protocol::current_protocol_identity();
    ec.traffic = traffic_;
    ec.routers_watch = routers_watch_;
    ec.records_bytes = records_bytes_;
    if (opt_.shared_threads) ec.keeper = keeper(ec);
    auto m = actors::start_etcd_membership(system, bridge, std::move(ec),
                                           std::make_shared<actors::LoadGauge>(), {}, std::move(view));
    if (!m) {
      std::fprintf(stderr, "membership bench: %s: %s\n", bridge->instance_id().c_str(),
                   m.error().to_string().c_str());
      return nullptr;
    }
    return std::make_unique<EtcdMember>(std::move(*m));
  }

  // Watch events and listings: the HTTP bodies the instances read (headers and chunk framing left out); with
  // routers watching, also the RECORDS frames the routers sent.
  std::optional<uint64_t> bytes_to_instances() const override {
    return traffic_->watch_bytes.load() + traffic_->range_bytes.load() + records_bytes_->load();
  }

  std::vector<std::pair<std::string, double>> counters() const override {
    return {{"calls", double(traffic_->calls.load())}, {"connections", double(traffic_->connections.load())}};
  }

 private:
  // One for every instance of this process: their leases are renewed in batches on one stream, by one
  // thread (a real instance has a keeper of its own).
  std::shared_ptr<etcd::LeaseKeeper> keeper(const actors::EtcdMembershipConfig& ec) {
    if (keeper_) return keeper_;
    auto client = etcd::EtcdClient::create({ec.endpoints, ec.request_timeout, ec.traffic});
    if (!client) return nullptr;  // the instance makes its own, and says why it cannot
    keeper_ = std::make_shared<etcd::LeaseKeeper>(std::move(*client));
    return keeper_;
  }

  bool routers_watch_;
  std::string endpoint_;
  MembershipOptions opt_;
  std::shared_ptr<etcd::Traffic> traffic_ = std::make_shared<etcd::Traffic>();
  std::shared_ptr<std::atomic<uint64_t>> records_bytes_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<etcd::LeaseKeeper> keeper_;
};

class EtcdBackend final : public RegistryBackend {
 public:
  explicit EtcdBackend(bool routers_watch) : routers_watch_(routers_watch) {}
  std::string describe() const override {
    return routers_watch_ ? "etcd (leases; the 2 routers watch and send RECORDS; heartbeats in-band to them)"
                          : "etcd (leases + watch, heartbeats in-band to 2 routers)";
  }

  bool start(const MembershipOptions&) override { return etcd_.start(); }
  double cpu_seconds() const override { return process_cpu_seconds(etcd_.pid()); }
  void stop() override { etcd_.stop(); }
  std::string member_endpoint() const override { return etcd_.client().text(); }
  int routers() const override { return 2; }

  // A killed instance's record outlives it by up to one TTL (its lease), and an instance that still sees
  // it alive (it never spoke to it: no connection broke) drops it one more TTL later (the grace period).
  std::chrono::milliseconds kill_limit(const MembershipOptions& o) const override {
    return o.interval * (o.misses + 4) + 2 * o.lease_ttl + std::chrono::milliseconds(1000);
  }

  // Past the lease, etcd's expiry sweep and the grace period: every directory has dropped the frozen
  // instances by the time they resume, and they must register again.
  std::chrono::milliseconds freeze_for(const MembershipOptions& o) const override {
    return RegistryBackend::freeze_for(o) + 2 * o.lease_ttl + std::chrono::milliseconds(1000);
  }

  std::vector<std::pair<std::string, double>> counters() const override {
    const std::string m = etcd_.scrape();
    auto v = [&](const char* name) { return etcd_.metric(m, name); };
    return {{"puts", v("etcd_mvcc_put_total")},
            {"deletes", v("etcd_mvcc_delete_total")},
            {"proposals", v("etcd_server_proposals_committed_total")},
            {"renewals", v("etcd_debugging_lease_renewed_total")}};
  }

 private:
  bool routers_watch_ = false;
  LocalEtcdRun etcd_;
};

}  // namespace

std::unique_ptr<RegistryBackend> make_etcd_backend(bool routers_watch) {
  return std::make_unique<EtcdBackend>(routers_watch);
}

std::unique_ptr<MemberSide> make_etcd_member_side(bool routers_watch, const std::string& endpoint,
                                                  const MembershipOptions& opt) {
  return std::make_unique<EtcdMemberSide>(routers_watch, endpoint, opt);
}

}  // namespace epd::bench
