// The worked example of docs/adding-a-role.md: a role that answers each SUBMIT with a RESULT whose tokens
// are the prompt's tokens in reverse order. It shows the whole recipe — settings, spawn function, bridge
// subscriptions, registration — in one small file, and it is exercised by tests/actors.
#include <spdlog/spdlog.h>

#include "epd/actors/role_support.hpp"
#include "epd/actors/roles/roles.hpp"

namespace epd::actors {
namespace {

caf::behavior echo(caf::event_based_actor* self, RoleContext ctx, uint32_t max_tokens) {
  harden(self, "echo");  // peer-change notices and other messages it does not handle are logged and dropped
  return {
      [=](protocol::Envelope& env) {
        auto* submit = std::get_if<protocol::Submit>(&env.body);
        if (!submit) return;
        protocol::RoomResult r;
        r.room = submit->room;
        r.ok = true;
        r.tokens.assign(submit->prompt.rbegin(), submit->prompt.rend());
        if (r.tokens.size() > max_tokens) r.tokens.resize(max_tokens);
        ctx.bridge->send(env.sender, std::move(r));
      },
  };
}

protocol::Result<RoleHandle> spawn_echo(RoleContext& ctx) {
  auto max = setting_u32(ctx.instance->settings, "max_tokens", 64, 1, 1u << 20);
  if (!max) return max.error();
  RoleHandle h;
  h.main = ctx.system->spawn(echo, ctx, *max);
  ctx.bridge->subscribe(protocol::MessageType::submit, h.main);
  return h;
}

}  // namespace

RoleSpec echo_role_spec() {
  RoleSpec spec;
  spec.name = "echo";
  spec.summary = "example role: answers SUBMIT with the prompt reversed";
  spec.needs_engine = false;
  spec.settings = {"max_tokens"};
  spec.spawn = spawn_echo;
  return spec;
}

}  // namespace epd::actors
