#pragma once
// `epd-bench cache`: the embedding cache's effect on time to first token. One workload in which every other
// request repeats the image of the one before runs on the same cluster config twice, with the encoder's and
// prefill's embedding caches off and on (fresh processes each time), one request at a time; TTFT p50 of
// both and their ratio are printed, and the tokens of every request must be the same in both runs.

int run_cache_bench(int argc, char** argv);
