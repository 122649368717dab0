#pragma once
// `epd-bench prefix`: the prefix caches and cache-aware placement on a multi-turn chat workload. N
// conversations share a system prompt of S tokens; each has T turns of U new user tokens and appends the
// answer it got, so every turn resends the whole conversation. The same workload runs on fresh clusters:
// one prefill with the caches off and on, then two prefills with least-loaded and with cache-aware
// placement. Printed: TTFT p50/p99 of the first and of the later turns, prefill tokens computed, KV bytes
// prefill wrote, cache hit ratios, and the ratios the prefix-cache goals are stated in.

int run_prefix_bench(int argc, char** argv);
