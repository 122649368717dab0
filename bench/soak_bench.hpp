#pragma once
// `epd-bench soak`: many small requests in blocks against a freshly started cluster; per block the
// throughput, the failures and the resident memory (VmRSS) of every role process, and at the end each
// process's RSS growth between the second and the last block (the first block is warm-up).

int run_soak_bench(int argc, char** argv);
