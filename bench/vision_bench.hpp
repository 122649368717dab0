#pragma once
// `epd-bench vision`: real vision towers (libmtmd) in epd against llama.cpp itself on the same files. For a
// random-weight pair of each layout (LLaVA, SmolVLM, Pixtral, ...; `--layout` picks some), with one item and
// with four: encode time per item of llama.cpp (epd-mtmd-reference) and of epd's encoder in-process (the same
// library: the difference is what epd adds), and the TTFT of the same request through llama.cpp and through a
// local cluster over shm with its stage times; then the RSS and PSS of each role against the language model's
// file size (the encoder loads the LM's vocabulary only, so it should hold none of its weights). An item is a
// picture (sent to /v1/generate), or for the audio towers Ultravox and Qwen2-Audio a 10 s clip (one 30 s
// Whisper chunk: 375 or 750 rows) sent as an OpenAI chat's input_audio part.

int run_vision_bench(int argc, char** argv);
