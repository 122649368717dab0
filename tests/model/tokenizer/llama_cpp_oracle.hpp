#pragma once
// llama.cpp as the tokenizer oracle: node-llama-cpp's prebuilt CPU build (tests/http/node/tokenize.mjs)
// tokenizes strings with a GGUF file's vocabulary, with and without special-token parsing.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "epd/model/tokenizer.hpp"

namespace epd::model::test {

std::string read_all(const std::filesystem::path& p);

// epd's ids for a text (the encode must succeed).
std::vector<TokenId> token_ids(const Tokenizer& t, const std::string& text, bool parse_special);

// llama.cpp's answer for every string: {"bos", "eos", "results": [{"plain", "special", "text",
// "text_special"}]} (see tokenize.mjs). vocab_only: the file has no tensors (llama.cpp's ggml-vocab-*.gguf).
// Scratch files go to dir.
nlohmann::json llama_cpp_tokens(const std::filesystem::path& gguf, const std::filesystem::path& dir,
                                const std::vector<std::string>& strings, bool vocab_only = false);

// llama.cpp's detokenize of most BPE vocabularies applies Hugging Face's clean_up_tokenization_spaces
// (" ." -> ".", " ' " -> "'", " 's" " 'm" " 're" " 've" -> no space); epd decodes losslessly, token by token,
// as a stream must. The rule, as llama.cpp applies it, turns epd's text into what llama.cpp prints.
std::string clean_spaces(const std::string& in);

}  // namespace epd::model::test
