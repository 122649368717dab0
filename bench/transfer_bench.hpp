#pragma once
// `epd-bench transfer`: the data plane's throughput and latency against memcpy, raw TCP and ZeroMQ baselines.
int run_transfer_bench(int argc, char** argv);
