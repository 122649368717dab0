#pragma once
// The built-in roles. Each returns its registration; builtin_roles() collects them.
#include "epd/actors/role_registry.hpp"

namespace epd::actors {

RoleSpec router_role_spec();
RoleSpec encoder_role_spec();
RoleSpec prefill_role_spec();
RoleSpec decode_role_spec();
RoleSpec echo_role_spec();  // the worked example of docs/adding-a-role.md

}  // namespace epd::actors
