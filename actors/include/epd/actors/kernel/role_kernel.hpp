#pragma once
// The role kernel: what every role is built from, so a role file holds only what is particular to it.
//   RoleBase        the context, the actor, the deadline timer every role state starts with
//   MessageTable    one list that subscribes and dispatches the control messages a role handles
//   start, spawn_main, role_behavior   the boilerplate of a role's actor
//   RoomTable       rooms by id with bounded tombstones (room_table.hpp)
//   sharing_lost_peer / peer_lost_error   the one peer-loss sweep (peer_loss.hpp)
//   SettingsSchema  settings declared once: accepted keys and parsing (settings_schema.hpp)
//   TransferWorkers the role's view of its transfer pool (transfer_workers.hpp)
// docs/adding-a-role.md walks through a role built from these.
#include <caf/all.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "epd/actors/kernel/deadline_timer.hpp"
#include "epd/actors/kernel/message_table.hpp"
#include "epd/actors/kernel/peer_loss.hpp"
#include "epd/actors/kernel/room_table.hpp"
#include "epd/actors/kernel/settings_schema.hpp"
#include "epd/actors/membership/membership.hpp"
#include "epd/actors/role_context.hpp"
#include "epd/actors/role_registry.hpp"
#include "epd/actors/role_support.hpp"

namespace epd::actors::kernel {

// The part every role's state starts with.
struct RoleBase {
  RoleContext ctx;
  caf::event_based_actor* self = nullptr;
  DeadlineTimer deadline;
  Bridge& bridge() const { return *ctx.bridge; }
};

// How every role names a room in its logs: "room 123", or "room 123 [req abc]" once the room's SUBMIT
// brought the client's request id, so one request can be grepped across every role's log. The id comes
// from the client: it is cut to kMaxLoggedRequestId bytes and escaped (printable ASCII only).
inline constexpr size_t kMaxLoggedRequestId = 128;
std::string room_tag(uint64_t room, std::string_view request_id);

// The one failure report: logs that `room` failed at `role` and, if `tell_router`, sends the router the
// RESULT that carries the cause (the router decides whether to retry).
void announce_failure(Bridge& bridge, std::string_view role, uint64_t room, std::string_view request_id,
                      const std::string& router, const protocol::Error& error, bool tell_router = true);

template <class State>
using TablePtr = std::shared_ptr<const MessageTable<State>>;

// The actor's behaviour: control messages through `table`, then the role's own handlers.
template <class State>
caf::behavior role_behavior(caf::stateful_actor<State>* self, TablePtr<State> table,
                            caf::message_handler own) {
  caf::message_handler control{[self, table](protocol::Envelope& env) { table->dispatch(self->state, env); }};
  return control.or_else(own);
}

// The first lines of every role's behaviour: hardens the actor (named State::name in its logs) and fills
// the kernel part of its state.
template <class State>
State& start(caf::stateful_actor<State>* self, RoleContext ctx) {
  harden(self, State::name);
  self->state.ctx = std::move(ctx);
  self->state.self = self;
  return self->state;
}

// Spawns the role's main actor, `behavior(self, ctx, table, args...)`, and routes the table's message types
// to it; on a start-up error (a type taken twice) the actor is stopped and the error returned.
template <class State, class... Args>
protocol::Result<caf::actor> spawn_main(RoleContext& ctx,
                                        caf::behavior (*behavior)(caf::stateful_actor<State>*, RoleContext,
                                                                  TablePtr<State>, Args...),
                                        TablePtr<State> table, Args... args) {
  auto main = ctx.system->spawn(behavior, ctx, table, std::move(args)...);
  if (auto st = table->subscribe(*ctx.bridge, main); !st) {
    caf::anon_send_exit(main, caf::exit_reason::user_shutdown);
    return st.error();
  }
  return main;
}

// A role's registration from its settings schema: the accepted keys come from the schema, and `spawn`
// gets the settings already read and checked.
template <class Settings, class Spawn>
RoleSpec make_role_spec(std::string name, std::string summary, bool needs_engine,
                        SettingsSchema<Settings> schema, Spawn spawn) {
  RoleSpec spec;
  spec.name = std::move(name);
  spec.summary = std::move(summary);
  spec.needs_engine = needs_engine;
  spec.settings = schema.keys();
  spec.spawn = [schema = std::move(schema), spawn](RoleContext& ctx) -> protocol::Result<RoleHandle> {
    auto settings = schema.read(ctx, ctx.instance->settings);
    if (!settings) return settings.error();
    return spawn(ctx, std::move(*settings));
  };
  return spec;
}

}  // namespace epd::actors::kernel
