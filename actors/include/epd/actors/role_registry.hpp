#pragma once
// Roles are registered by name: name -> settings keys + spawn function. The runner looks the role up by the
// instance's `role` key; adding a role is one new file plus one line in builtin_roles.cpp, and touches no
// other role (docs/adding-a-role.md).
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "epd/actors/role_context.hpp"

namespace epd::actors {

struct RoleSpec {
  std::string name;
  std::string summary;
  bool needs_engine = false;               // the runner creates a transfer engine for it
  bool runs_model = false;                 // computes with the model: takes a per-instance `threads`
  std::vector<std::string_view> settings;  // keys allowed in [defaults.<role>] / the instance table
  std::function<protocol::Result<RoleHandle>(RoleContext&)> spawn;
};

class RoleRegistry {
 public:
  void add(RoleSpec spec);
  const RoleSpec* find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, RoleSpec, std::less<>> roles_;
};

// The registry with every built-in role (router, encoder, prefill, decode, echo).
const RoleRegistry& builtin_roles();

}  // namespace epd::actors
