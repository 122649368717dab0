#pragma once
// The fault injector: an engine feature, not a backend. It wraps whichever backend's link a session got
// (config.fault) and injects errors, delays, stalls and a thrown "worker crash", reproducibly for a seed.
#include <memory>

#include "epd/transport/backend.hpp"
#include "epd/transport/config.hpp"

namespace epd::transport {

struct FaultCounters;
// Wraps `inner` with the fault injector of `config`, adding to `counters`.
std::unique_ptr<Link> make_fault_link(std::unique_ptr<Link> inner, const FaultConfig& config,
                                      std::shared_ptr<FaultCounters> counters);

}  // namespace epd::transport
