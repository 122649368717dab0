#include "epd/actors/kernel/role_kernel.hpp"

#include <spdlog/spdlog.h>

#include "epd/actors/role_support.hpp"
#include "epd/model/tokens.hpp"

namespace epd::actors::kernel {

protocol::Error peer_lost_error(const PeerDirectory::Change& change) {
  return protocol::make_error(protocol::ErrorCode::peer_died,
                              "peer '" + change.id + "' (incarnation " +
                                  std::to_string(change.old_incarnation) + ") " +
                                  (change.new_incarnation ? "restarted" : "is gone"));
}

std::string room_tag(uint64_t room, std::string_view request_id) {
  std::string tag = "room " + std::to_string(room);
  if (request_id.empty()) return tag;
  return tag + " [req " + model::escape_text(request_id.substr(0, kMaxLoggedRequestId)) + "]";
}

void announce_failure(Bridge& bridge, std::string_view role, uint64_t room, std::string_view request_id,
                      const std::string& router, const protocol::Error& error, bool tell_router) {
  spdlog::warn("{}: {} failed: {}", role, room_tag(room, request_id), error.to_string());
  if (tell_router && !router.empty()) report_failure(bridge, router, room, error);
}

}  // namespace epd::actors::kernel
