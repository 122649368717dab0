// The membership backends of `epd-bench membership` by name: the side in the bench's process and the side
// in each worker process (membership_backend.hpp).
#include "membership_backend.hpp"

namespace epd::bench {

std::unique_ptr<RegistryBackend> make_backend(const std::string& name) {
  if (name == "router") return make_embedded_backend(false);
  if (name == "router-full") return make_embedded_backend(true);
  if (name == "etcd") return make_etcd_backend(false);
  if (name == "etcd-routers") return make_etcd_backend(true);
  return nullptr;
}

std::unique_ptr<MemberSide> make_member_side(const std::string& name, const std::string& endpoint,
                                             const MembershipOptions& opt) {
  if (name == "router" || name == "router-full") return make_registry_member_side(endpoint, opt);
  if (name == "etcd" || name == "etcd-routers")
    return make_etcd_member_side(name == "etcd-routers", endpoint, opt);
  return nullptr;
}

}  // namespace epd::bench
