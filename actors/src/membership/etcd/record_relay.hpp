#pragma once
// etcd_watch = "routers": only routers watch etcd, and pass what their watch sees on to every other instance
// as RECORDS (epd/protocol/messages.hpp). An event then reaches N instances as one message encoded once per
// router, instead of N watch streams that etcd's JSON gateway encodes one by one (docs/architecture.md,
// "Membership in etcd"). Neither class does I/O: the membership actor sends what they build.
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "epd/protocol/messages.hpp"
#include "etcd_agent.hpp"

namespace epd::actors::etcd_backend {

// Which of the routers sends an instance its RECORDS, its full list and then the deltas: one, not every
// router, since every instance decodes what it is sent (a start is O(N^2) bytes). 0: `self` is that router;
// k: the k-th to step in if the instance stays silent (docs/architecture.md, "Routers watch for everyone").
// `routers` are the serving routers' ids, in order; a router that does not find itself there (its record
// not yet seen) answers 0, so that RECORDS are sent twice rather than not at all.
size_t list_rank(const std::vector<std::string>& routers, const std::string& self, const std::string& id);

// A router's copy of etcd's records, and the RECORDS that keep the other instances' copies equal to it.
class RecordMirror {
 public:
  explicit RecordMirror(std::string self = {}) : self_(std::move(self)) {}

  // What to send: `delta` to `delta_to` (instances that hold an earlier list and are ours), the full list
  // to `full_to` (instances new since the last flush, or of a new incarnation, whose list is ours to send).
  // Instances that became ours since the last flush (their router stopped serving) get `catch_up` instead
  // of the delta: the events after their old router's last word (router_sent), so that what it had not
  // sent yet is not lost; or the full list when we no longer keep those events.
  // Endpoints, ready for send_to_endpoints. New instances whose list another router sends are in
  // `awaited`, with our rank for each (list_rank).
  struct Flush {
    protocol::Records delta;
    std::vector<std::string> delta_to;
    protocol::Records catch_up;
    std::vector<std::string> catch_up_to;
    std::vector<std::string> full_to;
    std::vector<std::string> full_ids;  // the instances of full_to
    std::vector<std::pair<std::string, size_t>> awaited;
  };

  // A listing replaces everything (the router started, or its watch revision was compacted): every
  // instance gets the full list (returned: the endpoints), and nothing pending is sent.
  std::vector<std::string> list(const Listing& listing);
  // Watch events, in order: kept for the next flush.
  void watch(const Changes& changes);
  // The routers (by id) whose record etcd holds but which do not serve now (their connection broke or
  // their heartbeats stopped): their instances are shared out among the others at the next flush.
  void set_down(std::set<std::string> down) { down_ = std::move(down); }
  // Another router's heartbeat says it sent its instances RECORDS up to `revision`: where the catch-up for
  // its instances starts should it stop serving.
  void router_sent(const std::string& router, uint64_t revision) { router_sent_[router] = revision; }
  bool pending() const { return !pending_.empty(); }
  // Something to flush: events, or instances whose router changed.
  bool needs_flush() const { return pending() || serving() != sent_by_; }
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
  // delta, which no later delta would show as a gap. 0 for an instance whose RECORDS another router sends:
  // it is not short of what we did not send it.
  uint64_t sent_up_to(const std::string& id) const;
  // The last flush's revision, for the other routers (router_sent).
  uint64_t flushed_to() const { return since_; }
  // A new instance whose full list waits for the next flush: it holds nothing to compare yet.
  bool list_pending(const std::string& id) const { return fresh_.count(id) > 0; }
  // Flushed events kept for instances that change router: enough for a router's last window or two.
  static constexpr size_t kHistory = 4096;

 private:
  void keep_router(const std::string& id, const protocol::PeerInfo* info);  // null: its record went
  std::vector<std::string> serving() const;                                 // routers_ but down_

  std::string self_;
  std::vector<std::string> routers_;  // the routers' ids among records_, in order
  std::set<std::string> down_;
  std::vector<std::string> sent_by_;  // serving() as of the last flush: who sent each instance what
  std::map<std::string, uint64_t> router_sent_;  // other routers, as their heartbeats said
  std::map<std::string, protocol::PeerInfo> records_;
  uint64_t revision_ = 0;
  uint64_t since_ = 0;  // where the pending delta starts
  std::vector<protocol::RecordChange> pending_;
  std::deque<protocol::RecordChange> history_;  // flushed events after history_since_, up to since_
  uint64_t history_since_ = 0;
  uint64_t listed_at_ = 0;       // our last listing's revision: every instance got the full list then
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
  Step take(const std::string& router, protocol::Records records);  // moved from: no record is copied
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
