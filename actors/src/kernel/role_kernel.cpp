#include "epd/actors/kernel/role_kernel.hpp"

#include <spdlog/spdlog.h>

#include "epd/actors/role_support.hpp"

namespace epd::actors::kernel {

protocol::Error peer_lost_error(const PeerDirectory::Change& change) {
  return protocol::make_error(protocol::ErrorCode::peer_died,
                              "peer '" + change.id + "' (incarnation " + std::to_string(change.old_incarnation) +
                                  ") " + (change.new_incarnation ? "restarted" : "is gone"));
}

void announce_failure(Bridge& bridge, std::string_view role, uint64_t room, const std::string& router,
                      const protocol::Error& error, bool tell_router) {
  spdlog::warn("{}: room {} failed: {}", role, room, error.to_string());
  if (tell_router && !router.empty()) report_failure(bridge, router, room, error);
}

}  // namespace epd::actors::kernel
