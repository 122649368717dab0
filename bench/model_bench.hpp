#pragma once
// `epd-bench model`: prefill and decode throughput of the reference model, KV bytes per token.

int run_model_bench(int argc, char** argv);
