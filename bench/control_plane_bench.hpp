#pragma once
// Control-plane micro-benchmark: rooms/s and BOOTSTRAP -> KV_STATUS latency for a 1-page KV, through the
// real bridge (ZeroMQ + codec) and transfer engine (shm), with no model compute. Measures what the
// protocol and plumbing cost per room, without and with CURVE (authenticated, encrypted control plane).

namespace epd::bench {
int run_control_plane_bench(bool quick);
}
// `epd-bench control-plane [--quick]`.
int run_control_plane_cli(int argc, char** argv);
