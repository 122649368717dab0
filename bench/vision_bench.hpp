#pragma once
// `epd-bench vision`: real vision towers (libmtmd) in epd against llama.cpp itself on the same files. For a
// random-weight LLaVA ("mlp") and SmolVLM ("idefics3") pair, with one image and with four: encode time per
// image of llama.cpp (epd-mtmd-reference) and of epd's encoder in-process (the same library: the difference
// is what epd adds), and the TTFT of the same request through llama.cpp and through a local cluster over shm
// with its stage times; then the RSS and PSS of each role against the language model's file size (the
// encoder loads the LM's vocabulary only, so it should hold none of its weights).

int run_vision_bench(int argc, char** argv);
