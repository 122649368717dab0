#include "roles/roles.hpp"

namespace epd::actors {

const RoleRegistry& builtin_roles() {
  static const RoleRegistry registry = [] {
    RoleRegistry r;
    r.add(router_role_spec());
    r.add(encoder_role_spec());
    r.add(prefill_role_spec());
    r.add(decode_role_spec());
    r.add(echo_role_spec());
    return r;
  }();
  return registry;
}

}  // namespace epd::actors
