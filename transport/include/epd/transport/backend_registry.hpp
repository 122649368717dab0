#pragma once
// The registered transfer backends (transport/backends/CMakeLists.txt lists their folders; each folder
// registers itself by defining epd::transport::backends::<name>_plugin()).
#include <string>
#include <string_view>
#include <vector>

#include "epd/transport/backend.hpp"

namespace epd::transport {

// Every registered backend, in the order of the list (also those this build cannot start: plugin->make null).
const std::vector<const BackendPlugin*>& backend_plugins();
const BackendPlugin* find_backend(std::string_view name);
// "shm, tcp or rdma" (for error messages).
std::string backend_names_text();
// Every key in `options` must belong to some backend, and each backend must accept its own values.
Status check_backend_options(const BackendOptions& options);

}  // namespace epd::transport
