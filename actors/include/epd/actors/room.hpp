#pragma once
// A room is one request's transfer context. Its state only moves forward:
//   Bootstrapping -> WaitingForInput -> Transferring -> Success | Failed
// (steps may be skipped), Failed can be entered from any non-terminal state and always carries a reason,
// and terminal states never change. Both the prefill and the decode side use this type.
#include <cstdint>
#include <string>

#include "epd/protocol/errors.hpp"
#include "epd/protocol/messages.hpp"

namespace epd::actors {

using protocol::KvState;

class RoomState {
 public:
  KvState state() const { return state_; }
  bool terminal() const { return state_ == KvState::success || state_ == KvState::failed; }
  // Moves forward to `next` (not Failed: use fail()); false, and no change, for a backward, repeated or
  // post-terminal move.
  bool advance(KvState next);
  // Enters Failed with `error` unless already terminal; false if it was terminal.
  bool fail(protocol::Error error);
  const protocol::Error& failure() const { return failure_; }

 private:
  KvState state_ = KvState::bootstrapping;
  protocol::Error failure_;
};

std::string_view state_name(KvState s);

}  // namespace epd::actors
