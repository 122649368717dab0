// The worked example of docs/adding-a-role.md: a role that answers each SUBMIT with a RESULT whose tokens
// are the prompt's tokens in reverse order. It shows the whole recipe — settings schema, handler table,
// spawn function, registration — in one small file, and it is exercised by the e2e tests.
#include "epd/actors/kernel/role_kernel.hpp"
#include "roles/roles.hpp"

namespace epd::actors {
namespace {

struct EchoSettings {
  uint32_t max_tokens = 64;
};

struct EchoState : kernel::RoleBase {
  EchoSettings settings;
  static inline const char* name = "echo";
};

void on_submit(EchoState& st, const protocol::Envelope& env, protocol::Submit& submit) {
  protocol::RoomResult r;
  r.room = submit.room;
  r.ok = true;
  r.tokens.assign(submit.prompt.rbegin(), submit.prompt.rend());
  if (r.tokens.size() > st.settings.max_tokens) r.tokens.resize(st.settings.max_tokens);
  st.bridge().send(env.sender, std::move(r));
}

using Table = kernel::MessageTable<EchoState>;

// Peer-change notices and other actor messages it does not handle are logged and dropped (kernel::start).
caf::behavior echo(caf::stateful_actor<EchoState>* self, RoleContext ctx, kernel::TablePtr<EchoState> table,
                   EchoSettings settings) {
  kernel::start(self, std::move(ctx)).settings = settings;
  return kernel::role_behavior(self, table, {});
}

protocol::Result<RoleHandle> spawn_echo(RoleContext& ctx, EchoSettings settings) {
  auto table = std::make_shared<Table>();
  table->on<protocol::Submit>(on_submit);
  auto main = kernel::spawn_main(ctx, echo, kernel::TablePtr<EchoState>(table), settings);
  if (!main) return main.error();
  return RoleHandle{*main, std::nullopt, 0, {}, {}, {}};
}

}  // namespace

RoleSpec echo_role_spec() {
  kernel::SettingsSchema<EchoSettings> settings;
  settings.u32("max_tokens", &EchoSettings::max_tokens, 1, 1u << 20);
  return kernel::make_role_spec("echo", "example role: answers SUBMIT with the prompt reversed", false,
                                std::move(settings), spawn_echo);
}

}  // namespace epd::actors
