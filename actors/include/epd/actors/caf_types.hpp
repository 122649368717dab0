#pragma once
// Atoms and the message types actors exchange inside one process. None of these cross a process boundary
// through CAF (the wire is ZeroMQ + our codec), so they are allowed as unsafe (non-serialisable) types.
#include <caf/all.hpp>

#include "epd/protocol/codec.hpp"

namespace epd::actors {

using tick_atom = caf::atom_constant<caf::atom("tick")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using generate_atom = caf::atom_constant<caf::atom("generate")>;
using peers_atom = caf::atom_constant<caf::atom("peers")>;
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using hand_over_atom = caf::atom_constant<caf::atom("handover")>;

}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::protocol::Envelope)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::protocol::Error)
