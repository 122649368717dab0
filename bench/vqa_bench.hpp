#pragma once
// `epd-bench vqa`: the demo model (tools/demo-model, docs/demo-model.md) answering questions about pictures
// its scene generator draws for a seed: exact-answer accuracy per question type through a cluster (a config
// serving the demo model), colocated (epd's runner in-process) and llama.cpp itself (epd-mtmd-reference on
// the same two files), how often they agree, and the cluster's images per second and TTFT against the
// colocated run's.

int run_vqa_bench(int argc, char** argv);
