#pragma once
// Identity of this machine and fresh random numbers for tokens and incarnations.
#include <cstdint>
#include <string>

namespace epd::transport::detail {

// hostname + ":" + kernel boot id: equal on both ends exactly when they can share memory.
std::string local_host_id();
// 64 random bits from the kernel, never 0 (0 means "unset" in descriptors).
uint64_t random_u64();

}  // namespace epd::transport::detail
