#pragma once
// `epd-bench routers`: membership in etcd with two routers, on real role processes (tiny preset model)
// beside the embedded registry with one router, in the same run: an instance's start until every router
// would place on it; a kill -9 until every router routes around it, until no router lists it and (etcd)
// until its record is gone; and requests/s through one router vs two with the same clients.

namespace epd::bench {
// `epd-bench routers [--reps N] [--seconds S] [--clients C] [--interval-ms M] [--quick]`.
int run_routers_cli(int argc, char** argv);
}  // namespace epd::bench
