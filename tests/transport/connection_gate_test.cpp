#include <catch2/catch.hpp>

#include "tcp/connection_gate.hpp"

using epd::transport::tcp::ConnectionGate;
using Verdict = ConnectionGate::Verdict;

TEST_CASE("the connection gate bounds unauthenticated connections per source and all connections", "[tcp]") {
  ConnectionGate gate({.unauthenticated_per_source = 2, .total = 4});
  CHECK(gate.admit("10.0.0.1") == Verdict::admitted);
  CHECK(gate.admit("10.0.0.1") == Verdict::admitted);
  CHECK(gate.admit("10.0.0.1") == Verdict::too_many_unauthenticated);
  CHECK(gate.admit("10.0.0.2") == Verdict::admitted);  // another source has its own budget
  gate.left_unauthenticated("10.0.0.1");               // one of the first two showed the token
  CHECK(gate.admit("10.0.0.1") == Verdict::admitted);
  CHECK(gate.open() == 4);
  CHECK(gate.admit("10.0.0.3") == Verdict::too_many_connections);
  CHECK(gate.refused() == 2);
  gate.closed("10.0.0.1", false);  // the authenticated one leaves: frees the total, not the source's budget
  CHECK(gate.admit("10.0.0.1") == Verdict::too_many_unauthenticated);
  gate.closed("10.0.0.1", true);
  CHECK(gate.admit("10.0.0.1") == Verdict::admitted);
  CHECK(gate.first_refusal_of("10.0.0.9"));
  CHECK_FALSE(gate.first_refusal_of("10.0.0.9"));
}
