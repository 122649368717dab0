#pragma once
// A role's typed handler table: the one list that both subscribes the role to the control messages it
// handles and dispatches them. A type with no handler is never routed to the role (the bridge answers it
// with ERROR unexpected_message); a type handled twice, or already taken by another actor of the process,
// is a start-up error.
#include <caf/all.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "epd/actors/bridge.hpp"
#include "epd/protocol/messages.hpp"

namespace epd::actors::kernel {

// HELLO, HELLO_ACK, PEERS, HEARTBEAT and GOODBYE are handled by the membership and registry actors.
template <class Msg>
inline constexpr bool is_membership_message =
    std::is_same_v<Msg, protocol::Hello> || std::is_same_v<Msg, protocol::HelloAck> ||
    std::is_same_v<Msg, protocol::Peers> || std::is_same_v<Msg, protocol::Heartbeat> ||
    std::is_same_v<Msg, protocol::Goodbye>;

template <class State>
class MessageTable {
 public:
  // `handler(State&, const protocol::Envelope&, Msg&)` runs for every Msg that reaches the role.
  template <class Msg, class Handler>
  MessageTable& on(Handler handler) {
    static_assert(std::is_invocable_v<Handler, State&, const protocol::Envelope&, Msg&>,
                  "a handler takes (State&, const protocol::Envelope&, Msg&)");
    static_assert(!is_membership_message<Msg>,
                  "membership messages belong to the membership/registry actors");
    auto [it, fresh] = handlers_.try_emplace(Msg::kType);
    if (!fresh) duplicate_ = Msg::kType;
    it->second = [handler](State& st, protocol::Envelope& env) { handler(st, env, std::get<Msg>(env.body)); };
    return *this;
  }

  // Routes every handled type to `target`.
  protocol::Status subscribe(Bridge& bridge, const caf::actor& target) const {
    if (duplicate_)
      return protocol::make_error(protocol::ErrorCode::config_error,
                                  std::string(protocol::type_name(*duplicate_)) + " has two handlers");
    for (const auto& [type, _] : handlers_)
      if (auto st = bridge.subscribe(type, target); !st) return st;
    return {};
  }

  void dispatch(State& st, protocol::Envelope& env) const {
    // Only subscribed types are routed here, so every envelope has its handler.
    if (auto it = handlers_.find(env.type()); it != handlers_.end()) it->second(st, env);
  }

 private:
  std::map<protocol::MessageType, std::function<void(State&, protocol::Envelope&)>> handlers_;
  std::optional<protocol::MessageType> duplicate_;
};

}  // namespace epd::actors::kernel
