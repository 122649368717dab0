#pragma once
// How the engine builds its backends. Each backend directory defines one factory; the RDMA one exists only
// when the build found ibverbs (compile definition EPD_HAVE_RDMA), so this is the seam backends/rdma/ plugs
// into.
#include <memory>
#include <string>
#include "epd/transport/fence.hpp"

#include "epd/transport/backend.hpp"
#include "epd/transport/config.hpp"

namespace epd::transport {

// What every backend may need to know about its engine.
struct BackendContext {
  const EngineConfig& config;
  uint64_t token = 0;  // the engine's segment token; receivers refuse writes without it
  uint64_t incarnation = 0;
  std::string host_id;
  std::shared_ptr<FenceTable> fences;  // receivers that place bytes themselves enforce it
};

Result<std::unique_ptr<Backend>> make_shm_backend(const BackendContext& ctx);
Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendContext& ctx);
#ifdef EPD_HAVE_RDMA
// Fails (and the engine drops rdma with a log line) when no device is usable.
Result<std::unique_ptr<Backend>> make_rdma_backend(const BackendContext& ctx);
#endif

// Wraps `inner` with the fault injector of config.fault, adding to `counters`.
struct FaultCounters;
std::unique_ptr<Link> make_fault_link(std::unique_ptr<Link> inner, const FaultConfig& config,
                                      std::shared_ptr<FaultCounters> counters);

}  // namespace epd::transport
