#pragma once
// `epd-bench serve`: an OpenAI-API load generator in the spirit of `vllm bench serve`. Poisson arrivals at a
// given rate against /v1/chat/completions or /v1/completions of a running router (--url) or of a cluster it
// starts (--config); per request TTFT, inter-token latency and end-to-end latency from the SSE stream; p50,
// p90 and p99 of each, throughput, errors by status and code, and the HTTP/SSE overhead over the router's
// own TTFT (epd.first_token_ms).

int run_serve_bench(int argc, char** argv);
