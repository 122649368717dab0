#pragma once
// Defined by the file CMake generates from transport/backends/CMakeLists.txt's list of backend folders.
#include <vector>

#include "epd/transport/backend.hpp"

namespace epd::transport::backends {
std::vector<const BackendPlugin*> builtin();
}
