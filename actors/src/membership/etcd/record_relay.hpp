#pragma once
// etcd_watch = "routers": only routers watch etcd, and pass what their watch sees on to every other instance
// as RECORDS (epd/protocol/messages.hpp). An event then reaches N instances as one message encoded once per
// router, instead of N watch streams that etcd's JSON gateway encodes one by one (docs/architecture.md,
// "Membership in etcd"). Neither class does I/O: the membership actor sends what they build.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "epd/protocol/messages.hpp"
#include "etcd_agent.hpp"

namespace epd::actors::etcd_backend {

// Which of the routers sends a new instance its full list: one, not every router, since the lists are
// most of a start's bytes (every joiner needs one, of every record). 0: `self` is that router; k: the
// k-th to step in if the instance stays silent (docs/architecture.md, "Routers watch for everyone").
// `routers` are the routers' ids as etcd lists them, in order; a router that does not find itself there
// (its record not yet seen) answers 0, so that a list is sent twice rather than not at all.
size_t list_rank(const std::vector<std::string>& routers, const std::string& self, const std::string& id);

// A router's copy of etcd's records, and the RECORDS that keep the other instances' copies equal to it.
class RecordMirror {
 public:
  explicit RecordMirror(std::string self = {}) : self_(std::move(self)) {}

  // What to send: `delta` to `delta_to` (instances that hold an earlier list), the full list to `full_to`
  // (instances new since the last flush, or of a new incarnation, whose list is ours to send).
  // Endpoints, ready for send_to_endpoints. New instances whose list another router sends are in
  // `awaited`, with our rank for each (list_rank).
  struct Flush {
    protocol::Records delta;
    std::vector<std::string> delta_to;
    std::vector<std::string> full_to;
    std::vector<std::string> full_ids;  // the instances of full_to
    std::vector<std::pair<std::string, size_t>> awaited;
  };

  // A listing replaces everything (the router started, or its watch revision was compacted): every
  // instance gets the full list (returned: the endpoints), and nothing pending is sent.
  std::vector<std::string> list(const Listing& listing);
  // Watch events, in order: kept for the next flush.
  void watch(const Changes& changes);
  bool pending() const { return !pending_.empty(); }
  // The events since the last flush as one delta, and who gets the full list instead.
  Flush flush();
  // Every record at the newest revision seen.
  protocol::Records full() const;
  // The record of an instance that needs RECORDS (not a router), if etcd holds one.
  const protocol::PeerInfo* member(const std::string& id) const;
  // The instances that need RECORDS, by id.
  std::vector<std::string> members() const;
  uint64_t revision() const { return revision_; }
  // The revision every instance holding a list has been sent up to: the last flush's (events since then
  // wait for the next one). A router's heartbeats carry it, so that an instance can tell it lost the last
  // delta, which no later delta would show as a gap.
  uint64_t sent_up_to() const { return since_; }
  // A new instance whose full list waits for the next flush: it holds nothing to compare yet.
  bool list_pending(const std::string& id) const { return fresh_.count(id) > 0; }
  // Our list_rank for `id` among the routers etcd holds now.
  size_t rank_for(const std::string& id) const;

 private:
  void keep_router(const std::string& id, const protocol::PeerInfo* info);  // null: its record went

  std::string self_;
  std::vector<std::string> routers_;  // the routers' ids among records_, in order
  std::map<std::string, protocol::PeerInfo> records_;
  uint64_t revision_ = 0;
  uint64_t since_ = 0;  // where the pending delta starts
  std::vector<protocol::RecordChange> pending_;
  std::set<std::string> fresh_;  // need the full list at the next flush
};

// An instance's position in the routers' streams: which RECORDS to apply, whichever router sent them.
class RecordFollower {
 public:
  struct Step {
    std::optional<Listing> listing;  // a full list newer than ours
    std::optional<Changes> changes;  // the events of a delta that are newer than ours
    bool gap = false;                // a delta that starts after our revision: not applied
  };
  // RECORDS from `router`. A delta after a gap is not applied, and not asked about yet: the other router
  // sends the same events, and its delta may be on its way (we follow both streams). If we are still short
  // of it at the router's next heartbeat, short_of() says so. Before our first list a delta is dropped: the
  // list is on its way from one router, and sent again if we stay silent.
  Step take(const std::string& router, const protocol::Records& records);
  uint64_t revision() const { return at_; }
  // A router's heartbeat says it sent RECORDS up to `sent`: true when we lost some and should ask it for
  // the full list. Only when we are still short of what it had sent one heartbeat earlier (or of a delta
  // that came after a gap): until then the events may be on their way from the other router.
  bool short_of(const std::string& router, uint64_t sent);

 private:
  uint64_t at_ = 0;                        // our records equal etcd's at this revision
  std::map<std::string, uint64_t> ahead_;  // routers that had sent more than we held, and how much
};

}  // namespace epd::actors::etcd_backend
