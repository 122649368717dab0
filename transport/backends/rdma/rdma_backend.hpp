#pragma once
// The RDMA (ibverbs) backend: one-sided RDMA WRITEs over RC QPs into the peer's registered regions.
// Built only when rdma-core is found (EPD_HAVE_RDMA); offered only when a usable device exists.
#include <memory>

#include "epd/transport/backend.hpp"
#include "epd/transport/config.hpp"

namespace epd::transport {

// Opens the device, registers nothing yet, starts the handshake listener and the completion thread.
// Errors (config_error) carry one line saying why rdma cannot be offered, e.g. "no RDMA devices".
Result<std::unique_ptr<Backend>> make_rdma_backend(const RdmaConfig& cfg);

}  // namespace epd::transport
