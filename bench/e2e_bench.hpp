#pragma once
// `epd-bench e2e`: the disaggregated pipeline against a running (or freshly started) cluster — TTFT, TPOT,
// throughput — next to the same workload run colocated in this process; and a control-plane
// micro-benchmark (rooms/s, BOOTSTRAP -> KV_STATUS latency with a 1-page KV).

int run_e2e_bench(int argc, char** argv);
