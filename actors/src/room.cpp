#include "epd/actors/room.hpp"

namespace epd::actors {

bool RoomState::advance(KvState next) {
  if (terminal() || next == KvState::failed || uint8_t(next) <= uint8_t(state_)) return false;
  state_ = next;
  return true;
}

bool RoomState::fail(protocol::Error error) {
  if (terminal()) return false;
  state_ = KvState::failed;
  failure_ = std::move(error);
  if (failure_.detail.empty()) failure_.detail = std::string(protocol::error_name(failure_.code));
  return true;
}

std::string_view state_name(KvState s) {
  switch (s) {
    case KvState::bootstrapping: return "Bootstrapping";
    case KvState::waiting_for_input: return "WaitingForInput";
    case KvState::transferring: return "Transferring";
    case KvState::success: return "Success";
    case KvState::failed: return "Failed";
  }
  return "?";
}

}  // namespace epd::actors
