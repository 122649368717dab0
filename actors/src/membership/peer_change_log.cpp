#include "membership/peer_change_log.hpp"

#include <spdlog/spdlog.h>

namespace epd::actors {

void report_peer_change(const PeerDirectory::Change& c, const std::string& self_id,
                        MembershipMetrics* metrics, std::string_view left_note) {
  if (c.id == self_id) return;
  if (metrics) {
    if (c.new_incarnation != 0)
      metrics->incarnation_seen(c.role);
    else
      metrics->peer_lost(c.role, "left");
  }
  if (c.new_incarnation == 0)
    spdlog::info("membership: peer '{}' left{}{}", c.id, left_note.empty() ? "" : " ", left_note);
  else if (c.old_incarnation == 0)
    spdlog::info("membership: peer '{}' joined", c.id);
  else
    spdlog::info("membership: peer '{}' restarted (incarnation {} -> {})", c.id, c.old_incarnation,
                 c.new_incarnation);
}

}  // namespace epd::actors
