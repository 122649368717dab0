#pragma once
// The role kernel: what every role is built from, so a role file holds only what is particular to it.
//   RoleBase        the context, the actor, the deadline timer every role state starts with
//   MessageTable    one list that subscribes and dispatches the control messages a role handles
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
#include "epd/actors/membership.hpp"
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

// The one failure report: logs that `room` failed at `role` and, if `tell_router`, sends the router the
// RESULT that carries the cause (the router decides whether to retry).
void announce_failure(Bridge& bridge, std::string_view role, uint64_t room, const std::string& router,
                      const protocol::Error& error, bool tell_router = true);

// The actor's behaviour: control messages through `table`, then the role's own handlers.
template <class State>
caf::behavior role_behavior(caf::stateful_actor<State>* self, std::shared_ptr<const MessageTable<State>> table,
                            caf::message_handler own) {
  caf::message_handler control{[self, table](protocol::Envelope& env) { table->dispatch(self->state, env); }};
  return control.or_else(own);
}

// Routes `table`'s message types to the role's main actor; on a start-up error the actor is stopped.
template <class State>
protocol::Status route(RoleContext& ctx, const MessageTable<State>& table, const caf::actor& main) {
  auto st = table.subscribe(*ctx.bridge, main);
  if (!st) caf::anon_send_exit(main, caf::exit_reason::user_shutdown);
  return st;
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
