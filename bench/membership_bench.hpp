#pragma once
// `epd-bench membership`: thousands of lightweight simulated instances (a bridge and a membership actor
// each: no model, no engine, no role), spread over worker processes (membership_fleet.hpp), against one
// registry that runs in a child process, so that its CPU time is its own. It kills and adds instances one at
// a time and prints, per change, the time until every live instance's directory lists exactly the live
// instances, the control-plane bytes the instances received, and the registry's CPU; for PEERS deltas and for
// the full lists they replaced, and for membership in a real etcd (with two routers among the instances: also
// until they route around a kill), in the same run.

namespace epd::bench {
// `epd-bench membership [--instances N] [--changes K] [--interval-ms M] [--lease-ttl-ms T]
//  [--per-process P] [--instances-nice N] [--backend router-full|router|etcd|etcd-routers]...`;
//  with `--worker BACKEND --endpoint E`, one of its worker processes.
int run_membership_cli(int argc, char** argv);
}  // namespace epd::bench
