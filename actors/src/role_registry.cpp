#include "epd/actors/role_registry.hpp"

namespace epd::actors {

void RoleRegistry::add(RoleSpec spec) {
  std::string name = spec.name;
  roles_.insert_or_assign(std::move(name), std::move(spec));
}

const RoleSpec* RoleRegistry::find(std::string_view name) const {
  auto it = roles_.find(name);
  return it == roles_.end() ? nullptr : &it->second;
}

std::vector<std::string> RoleRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : roles_) out.push_back(name);
  return out;
}

}  // namespace epd::actors
