#pragma once
// One membership change as both membership backends (the embedded registry's PEERS, etcd's watch) report
// it: a log line and the membership counters.
#include <string>
#include <string_view>

#include "epd/actors/membership/peer_directory.hpp"
#include "epd/actors/process_metrics.hpp"

namespace epd::actors {

// Our own entry is neither logged nor counted. `left_note` follows "left" in the log line (why it left, as
// the backend knows it; may be empty). `metrics` may be null.
void report_peer_change(const PeerDirectory::Change& c, const std::string& self_id,
                        MembershipMetrics* metrics, std::string_view left_note);

}  // namespace epd::actors
