#pragma once
// memfd-backed shared mappings: the one place that creates and destroys them.
#include <cstdint>
#include <string>

#include "epd/transport/region.hpp"
#include "epd/transport/types.hpp"

namespace epd::transport::detail {

uint64_t page_size();
// Creates a memfd of `bytes` rounded up to the page size and maps it shared; pages read as zero.
Result<Region> create_memfd_region(const std::string& memfd_name, uint64_t bytes);
// Unmaps and closes; safe on a default Region.
void destroy_memfd_region(Region& region);

}  // namespace epd::transport::detail
