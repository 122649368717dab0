// The tokenizers of the families epd serves, on their real vocabularies: llama.cpp's vocab-only GGUF files
// (models/ggml-vocab-*.gguf in llama.cpp's source bundle, cmake/deps.cmake) for Llama 3 (llama-bpe), Qwen2,
// Qwen2.5 and Qwen3 (qwen2), Phi-3 and Llama 2 (SentencePiece), and a Gemma-3-style SentencePiece vocabulary
// written here (llama.cpp's bundle has no Gemma 3 file). For each, epd's ids equal
//  - the test vectors beside the file (.inp texts, .out ids: what Hugging Face's tokenizer gives, the format
//    of llama.cpp's tests/test-tokenizer-0.cpp), and
//  - llama.cpp's own tokenization (node-llama-cpp, tokenize.mjs) of the probe strings, the families' chat
//    markers and the .inp texts, with and without special-token parsing; the decoded text too.
#include <catch2/catch.hpp>
#include <set>
#include <sstream>

#include "epd/model/tokenizer_load.hpp"
#include "fixtures.hpp"
#include "llama_cpp_oracle.hpp"

namespace epd::model::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path vocab_file(const std::string& name) {
  return fs::path(EPD_LLAMA_CPP_SRC) / "models" / ("ggml-vocab-" + name + ".gguf");
}

// The .inp texts (separated by "\n__ggml_vocab_test__\n") and the .out ids (one line of ids per text).
std::vector<std::pair<std::string, std::vector<TokenId>>> test_vectors(const fs::path& gguf) {
  const std::string inp = read_all(gguf.string() + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_all(gguf.string() + ".out"));
  std::vector<std::pair<std::string, std::vector<TokenId>>> v;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    REQUIRE(i < texts.size());
    std::istringstream ids(line);
    std::vector<TokenId> expected;
    for (TokenId id; ids >> id;) expected.push_back(id);
    v.emplace_back(texts[i], std::move(expected));
  }
  REQUIRE(v.size() == texts.size());
  return v;
}

// The probe strings, every family's chat markers among text and spaces, and a few SentencePiece corners.
std::vector<std::string> family_probes() {
  std::vector<std::string> p = probe_strings();
  for (const char* s : {
           "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
           "<|start_header_id|> assistant <|end_header_id|> <|eot_id|> x",
           "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>assistant\n",
           "<|endoftext|><|im_end|> <think>\nhm\n</think>\n",
           "<|user|>\nHello <|end|>\n<|assistant|> Hi </s> bye",
           "<|system|>  spaced  <|end|>  \n  <|endoftext|>  end",
           "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
           "<bos><start_of_turn>  spaced\t<end_of_turn>  ",
           "<s> </s> <unk> <pad> <mask> [@BOS@] <unused0> <start_of_image>",
           "  leading and trailing  ",
           "\n\n\nnewlines\n\n",
           "\t\ttabs\t",
           "<0x0A> and <0xFF> spelled out",
       })
    p.push_back(s);
  return p;
}

// epd's ids for every string equal llama.cpp's, with and without special-token parsing, and epd's decoded
// text equals llama.cpp's detokenized text (after clean_spaces where llama.cpp applies it).
void agree_all(const Tokenizer& epd, const std::vector<std::string>& strings, const json& oracle,
               bool clean) {
  CHECK(epd.bos() == oracle.at("bos").get<TokenId>());
  CHECK(epd.eos() == oracle.at("eos").get<TokenId>());
  size_t equal = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    INFO("\"" << escape_text(strings[i]) << "\"");
    const json& r = oracle["results"][i];
    const auto plain = r.at("plain").get<std::vector<TokenId>>();
    const auto special = r.at("special").get<std::vector<TokenId>>();
    const auto epd_plain = token_ids(epd, strings[i], false), epd_special = token_ids(epd, strings[i], true);
    CHECK(epd_plain == plain);
    CHECK(epd_special == special);
    const std::string text = decode(epd, plain), text_special = decode(epd, special, true);
    CHECK((clean ? clean_spaces(text) : text) == r.at("text").get<std::string>());
    CHECK((clean ? clean_spaces(text_special) : text_special) == r.at("text_special").get<std::string>());
    equal += epd_plain == plain && epd_special == special;
  }
  CHECK(equal == strings.size());
}

// One of llama.cpp's vocab-only files: its test vectors, then llama.cpp on the probes and the vectors' texts.
// clean: llama.cpp's detokenize cleans up spaces for this pre-tokenizer (llama-bpe does, qwen2 does not).
void check_vocab_file(const std::string& name, const std::string& kind, bool clean) {
  const fs::path gguf = vocab_file(name);
  REQUIRE(fs::exists(gguf));
  auto loaded = load_tokenizer(gguf.string());
  INFO(name << ": " << (loaded.ok() ? std::string() : loaded.error().detail));
  REQUIRE(loaded.ok());
  const Tokenizer& epd = *loaded->tokenizer;
  CHECK(epd.kind() == kind);

  const auto vectors = test_vectors(gguf);
  CHECK(vectors.size() >= 40);
  size_t equal = 0;
  for (const auto& [text, expected] : vectors) {
    INFO(".inp \"" << escape_text(text) << "\"");
    const auto got = token_ids(epd, text, false);
    CHECK(got == expected);
    equal += got == expected;
  }
  CHECK(equal == vectors.size());

  ScratchDir dir("tok_family_" + name);
  std::vector<std::string> strings = family_probes();
  for (const auto& v : vectors) strings.push_back(v.first);
  const json oracle = llama_cpp_tokens(gguf, dir.path(), strings, /*vocab_only=*/true);
  agree_all(epd, strings, oracle, clean);
}

// A vocabulary laid out as convert_hf_to_gguf.py writes Gemma 3's: <pad> <eos> <bos> <unk> <mask> [@BOS@] and
// <unusedN> first, the chat markers <start_of_turn> <end_of_turn> (control tokens, score -1000, as the
// converter marks tokenizer_config.json's special added tokens), whitespace-run pieces, the trained pieces
// (byte fallback, merges, the user-defined <tool>), image markers last; no dummy prefix.
VocabMetadata gemma3_vocab(const fs::path& spm_model) {
  const VocabMetadata trained = sentencepiece_vocab(spm_model);
  VocabMetadata v;
  v.model = "llama";
  v.pre = "default";
  std::set<std::string> seen;
  auto add = [&](const std::string& token, float score, int32_t type) {
    if (!seen.insert(token).second) return;
    v.tokens.push_back(token);
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3;
  for (const char* t : {"<pad>", "<eos>", "<bos>"}) add(t, -1000.0f, kControl);
  add("<unk>", -1000.0f, kUnknown);
  for (const char* t : {"<mask>", "[@BOS@]"}) add(t, -1000.0f, kControl);
  for (int i = 0; i < 6; ++i) add("<unused" + std::to_string(i) + ">", -1000.0f, kControl);
  for (const char* t : {"<start_of_turn>", "<end_of_turn>"}) add(t, -1000.0f, kControl);
  for (const char* t : {"\n", "\n\n", "\n\n\n", "\t", "\t\t", "\xE2\x96\x81\xE2\x96\x81",
                        "\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81"})
    add(t, 0.0f, kNormal);
  for (size_t i = 0; i < trained.tokens.size(); ++i)
    if (trained.token_types[i] != kUnknown && trained.token_types[i] != kControl)
      add(trained.tokens[i], trained.scores[i], trained.token_types[i]);
  for (const char* t : {"<start_of_image>", "<end_of_image>"}) add(t, -1000.0f, kControl);
  v.eos = 1;
  v.bos = 2;
  v.unk = 3;
  v.add_bos = true;
  v.add_space_prefix = false;
  return v;
}

}  // namespace

TEST_CASE("Llama 3's vocabulary (llama-bpe) tokenizes as llama.cpp does") {
  check_vocab_file("llama-bpe", "bpe", true);
}

TEST_CASE("Qwen2's vocabulary (qwen2: Qwen2, Qwen2.5, Qwen3) tokenizes as llama.cpp does") {
  check_vocab_file("qwen2", "bpe", false);
}

TEST_CASE("Phi-3's SentencePiece vocabulary tokenizes as llama.cpp does") {
  check_vocab_file("phi-3", "sentencepiece", false);
}

TEST_CASE("Llama 2's SentencePiece vocabulary (llama-spm) tokenizes as llama.cpp does") {
  check_vocab_file("llama-spm", "sentencepiece", false);
}

TEST_CASE("a Gemma-3-style SentencePiece vocabulary tokenizes as llama.cpp does") {
  ScratchDir dir("tok_family_gemma3");
  const fs::path gguf = dir.path() / "gemma3.gguf";
  write_tokenizer_gguf(gguf, gemma3_vocab(train_sentencepiece(dir.path())));
  auto loaded = load_tokenizer(gguf.string());
  REQUIRE(loaded.ok());
  const Tokenizer& epd = *loaded->tokenizer;
  CHECK(epd.kind() == "sentencepiece");
  CHECK_FALSE(epd.strips_leading_space());
  CHECK(epd.special_id("<start_of_turn>") == TokenId{12});
  const std::vector<std::string> strings = family_probes();
  const json oracle = llama_cpp_tokens(gguf, dir.path(), strings);
  agree_all(epd, strings, oracle, false);
}

TEST_CASE("vocabularies of families epd does not serve are refused by name") {
  // Gemma 4's BPE (tokenizer.ggml.model "gemma4") and Qwen3.5's pre-tokenizer ("qwen35").
  for (auto [name, says] : {std::pair{"gemma-4", "\"gemma4\""}, std::pair{"qwen35", "\"qwen35\""}}) {
    INFO(name);
    auto loaded = load_tokenizer(vocab_file(name).string());
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.error().code == protocol::ErrorCode::config_error);
    CHECK_THAT(loaded.error().detail, Catch::Contains(says) && Catch::Contains("not supported"));
  }
}

}  // namespace epd::model::test
