// Stand-in for the transport library's names of backends, so that epd_config links in the launcher branch
// before the transport library is merged. Only built when no epd_transport target exists (see
// apps/epd-cluster/CMakeLists.txt); delete it once transport/src/types.cpp is in.
#include "epd/transport/types.hpp"

namespace epd::transport {

std::string_view backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::shm:
      return "shm";
    case BackendKind::tcp:
      return "tcp";
    case BackendKind::rdma:
      return "rdma";
  }
  return "unknown";
}

std::optional<BackendKind> parse_backend(std::string_view name) {
  if (name == "shm") return BackendKind::shm;
  if (name == "tcp") return BackendKind::tcp;
  if (name == "rdma") return BackendKind::rdma;
  return std::nullopt;
}

}  // namespace epd::transport
