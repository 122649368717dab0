#pragma once
// `epd-bench placement`: what one placement costs the router at 10 to 5,000 instances per role, with
// cache-aware scores (multi-turn conversations sharing a system prompt), rooms coming and going and
// heartbeats changing loads. The router's PlacementIndex against scoring every instance (its definition,
// and what the router did before it) in the same run, on the same state: µs per request, the ratio, and
// how often the two chose the same instances.

// `epd-bench placement [--instances 10,100,1000,5000] [--requests 20000] [--seed 1]`.
int run_placement_bench(int argc, char** argv);
