#include "fault_seeds.hpp"

#include "epd/transport/fault.hpp"

namespace epd::testing {

uint64_t seed_failing_first_job(double rate, uint64_t clean_ops) {
  using transport::fault_injects;
  using transport::fault_session_seed;
  auto clean = [&](uint64_t s) {
    for (uint64_t i = 0; i < clean_ops; ++i)
      if (fault_injects(s, i, rate)) return false;
    return true;
  };
  uint64_t seed = 1;
  while (!(fault_injects(fault_session_seed(seed, 0), 0, rate) &&
           fault_injects(fault_session_seed(seed, 1), 0, rate) && clean(fault_session_seed(seed, 2))))
    ++seed;
  return seed;
}

}  // namespace epd::testing
