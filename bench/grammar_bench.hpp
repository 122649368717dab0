#pragma once
// `epd-bench grammar`: what constrained decoding costs per generated token (docs/model.md, "Grammars"): the
// grammar mask over the whole vocabulary (llama.cpp's matcher) and the accept of the drawn token, for a few
// grammars on vocabularies of several sizes (the demo model's, llama.cpp's vocab-only files of real models).

// `epd-bench grammar [--gguf FILE]... [--tokens 200] [--seed 1]`.
int run_grammar_bench(int argc, char** argv);
