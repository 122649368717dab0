#pragma once
// Seeds for the fault backend's deterministic error injection, chosen so a test knows exactly which writes
// fail (transport/include/epd/transport/fault.hpp: each session's n-th op fails by (seed, session, n)).
#include <cstdint>

namespace epd::testing {

// The first seed at `rate` whose first write fails, whose retry session's first write fails too, and whose
// next session then writes `clean_ops` ops cleanly: the first job fails twice in a row (for good, after its
// one retry), and nothing else fails.
uint64_t seed_failing_first_job(double rate, uint64_t clean_ops);

}  // namespace epd::testing
