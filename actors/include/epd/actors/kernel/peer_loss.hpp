#pragma once
// The one peer-loss sweep. A room (or a router attempt) names the peers it shares, each with the
// incarnation it was placed on (0 = not heard from yet); only the loss of that incarnation affects it.
#include <string>
#include <string_view>
#include <vector>

#include "epd/actors/membership/peer_directory.hpp"
#include "epd/protocol/errors.hpp"

namespace epd::actors::kernel {

struct SharedPeer {
  std::string_view id;
  uint64_t incarnation = 0;
};

// Whether `change` (a peer that restarted or left) ends what `peer` names.
inline bool lost(const SharedPeer& peer, const PeerDirectory::Change& change) {
  return change.old_incarnation != 0 && !peer.id.empty() && peer.id == change.id &&
         (peer.incarnation == 0 || peer.incarnation == change.old_incarnation);
}

// Ids of the entries whose `shared_peers()` (the peers whose loss ends them in their current state)
// include one lost in `change`; collected first, so the caller may end them.
template <class Table>
std::vector<uint64_t> sharing_lost_peer(const Table& table, const PeerDirectory::Change& change) {
  std::vector<uint64_t> out;
  for (const auto& [id, entry] : table)
    for (const SharedPeer& p : entry.shared_peers())
      if (lost(p, change)) {
        out.push_back(id);
        break;
      }
  return out;
}

// "peer 'x' (incarnation N) restarted" / "... is gone": the cause every role reports for such a room.
protocol::Error peer_lost_error(const PeerDirectory::Change& change);

}  // namespace epd::actors::kernel
