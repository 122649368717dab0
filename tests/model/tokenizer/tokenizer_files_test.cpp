// Tokenizers loaded from files: GGUF vocabularies (written by the test-side GGUF writer) and Hugging Face
// directories, and the clear errors of files that lack a vocabulary or carry a hostile one.
#include <catch2/catch.hpp>
#include <fstream>

#include "epd/model/tokenizer_load.hpp"
#include "fixtures.hpp"
#include "gguf_writer.hpp"

namespace epd::model::test {
namespace {

namespace fs = std::filesystem;

std::vector<TokenId> file_ids(const Tokenizer& t, std::string_view text, bool special) {
  auto r = t.encode(text, special);
  REQUIRE(r.ok());
  return *r;
}

void same_tokens(const Tokenizer& a, const Tokenizer& b) {
  CHECK(a.vocab_size() == b.vocab_size());
  CHECK(a.bos() == b.bos());
  CHECK(a.eos() == b.eos());
  for (const std::string& s : probe_strings()) {
    INFO(s);
    CHECK(file_ids(a, s, false) == file_ids(b, s, false));
    CHECK(file_ids(a, s, true) == file_ids(b, s, true));
  }
}

std::string load_error(const std::string& path) {
  auto t = load_tokenizer(path);
  REQUIRE_FALSE(t.ok());
  return t.error().detail;
}

}  // namespace

TEST_CASE("a GGUF file's vocabulary loads as the tokenizer it describes") {
  ScratchDir dir("tok_gguf");
  VocabMetadata spm = sentencepiece_vocab(train_sentencepiece(dir.path()));
  spm.chat_template = "{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]";
  const BpeModel bpe = train_bpe(tokenizer_corpus(), 200);
  for (const VocabMetadata& v : {spm, bpe_vocab(bpe, "gpt-2"), bpe_vocab(bpe, "llama-bpe")}) {
    INFO(v.model + " " + v.pre);
    const fs::path file = dir.path() / "vocab.gguf";
    write_tokenizer_gguf(file, v);
    auto loaded = load_tokenizer(file.string());
    if (!loaded) FAIL(loaded.error().detail);
    auto direct = tokenizer_from_vocab(v);
    REQUIRE(direct.ok());
    same_tokens(*loaded->tokenizer, **direct);
    CHECK(loaded->chat_template == v.chat_template);
  }
}

TEST_CASE("a Hugging Face directory loads tokenizer.model or tokenizer.json with its config") {
  ScratchDir dir("tok_hf");
  const fs::path spm_dir = dir.path() / "spm", bpe_dir = dir.path() / "bpe";
  fs::create_directories(spm_dir);
  fs::create_directories(bpe_dir);
  fs::copy_file(train_sentencepiece(dir.path()), spm_dir / "tokenizer.model");
  std::ofstream(spm_dir / "tokenizer_config.json")
      << R"({"add_bos_token": false, "chat_template": "[INST]"})";
  auto spm = load_tokenizer(spm_dir.string());
  if (!spm) FAIL(spm.error().detail);
  CHECK(spm->tokenizer->kind() == "sentencepiece");
  CHECK_FALSE(spm->tokenizer->add_bos());
  CHECK(spm->chat_template == "[INST]");

  const BpeModel m = train_bpe(tokenizer_corpus(), 100);
  std::ofstream(bpe_dir / "tokenizer.json") << bpe_tokenizer_json(m, "llama-bpe");
  std::ofstream(bpe_dir / "tokenizer_config.json")
      << R"({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}, "add_bos_token": true,)"
      << R"( "chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "<|im_start|>"}]})";
  auto bpe = load_tokenizer(bpe_dir.string());
  if (!bpe) FAIL(bpe.error().detail);
  CHECK(bpe->tokenizer->kind() == "bpe");
  CHECK(bpe->tokenizer->bos() == bpe->tokenizer->special_id("<|im_start|>"));
  CHECK(bpe->tokenizer->eos() == bpe->tokenizer->special_id("<|im_end|>"));
  CHECK(bpe->tokenizer->add_bos());
  CHECK(bpe->chat_template == "<|im_start|>");

  std::ofstream(bpe_dir / "tokenizer_config.json") << R"({"bos_token": "<nope>"})";
  CHECK_THAT(load_error(bpe_dir.string()), Catch::Contains("<nope>"));
  std::ofstream(bpe_dir / "tokenizer_config.json") << "{not json";
  CHECK_THAT(load_error(bpe_dir.string()), Catch::Contains("malformed JSON"));
  CHECK_THAT(load_error((dir.path() / "nowhere").string()), Catch::Contains("no such file"));
  fs::create_directories(dir.path() / "empty");
  CHECK_THAT(load_error((dir.path() / "empty").string()),
             Catch::Contains("no tokenizer.model or tokenizer.json"));
}

TEST_CASE("GGUF files without a usable vocabulary give clear errors") {
  ScratchDir dir("tok_gguf_bad");
  const std::string file = (dir.path() / "bad.gguf").string();
  const BpeModel m = train_bpe(tokenizer_corpus(), 20);
  auto with = [&](auto edit) {
    VocabMetadata v = bpe_vocab(m, "gpt-2");
    edit(v);
    write_tokenizer_gguf(file, v);
    return load_error(file);
  };
  CHECK_THAT(with([](VocabMetadata& v) { v.model = "bert"; }), Catch::Contains("\"bert\" is not supported"));
  CHECK_THAT(with([](VocabMetadata& v) { v.pre = "tekken"; }),
             Catch::Contains("\"tekken\" is not supported"));
  CHECK_THAT(with([](VocabMetadata& v) { v.bos = 1u << 19; }), Catch::Contains("outside the vocabulary"));
  CHECK_THAT(with([](VocabMetadata& v) { v.token_types.pop_back(); }), Catch::Contains("differ in count"));
  CHECK_THAT(with([](VocabMetadata& v) { v.token_types[3] = 9; }), Catch::Contains("token type 9"));
  CHECK_THAT(with([](VocabMetadata& v) { v.merges[0] = "nospace"; }), Catch::Contains("nospace"));
  CHECK_THAT(with([](VocabMetadata& v) { v.tokens[5] = std::string(kMaxTokenBytes + 1, 'x'); }),
             Catch::Contains("longer than"));
  ScratchDir spm_dir("tok_gguf_spm_bad");
  VocabMetadata spm = sentencepiece_vocab(train_sentencepiece(spm_dir.path()));
  for (auto& t : spm.token_types)
    if (t == 2) t = 1;  // no unknown piece left
  spm.unk.reset();
  write_tokenizer_gguf(file, spm);
  CHECK_THAT(load_error(file), Catch::Contains("no unknown token"));

  testing::GgufWriter no_vocab;  // a GGUF with no tokenizer at all
  no_vocab.set_string("general.architecture", "llama");
  REQUIRE(no_vocab.write(file).ok());
  CHECK_THAT(load_error(file), Catch::Contains("no tokenizer.ggml.model"));
  testing::GgufWriter wrong_type;
  wrong_type.set_string("tokenizer.ggml.model", "gpt2");
  wrong_type.set_f32s("tokenizer.ggml.tokens", std::vector<float>{1, 2});
  REQUIRE(wrong_type.write(file).ok());
  CHECK_THAT(load_error(file), Catch::Contains("tokenizer.ggml.tokens is not an array of string"));

  write_tokenizer_gguf(file, bpe_vocab(m, "gpt-2"));  // every truncation of the metadata is an error
  const auto size = fs::file_size(file);
  for (uint64_t cut : {uint64_t{3}, uint64_t{24}, uint64_t{100}, uint64_t{2000}, size / 2}) {
    fs::resize_file(file, cut);
    CHECK_FALSE(load_tokenizer(file).ok());
    write_tokenizer_gguf(file, bpe_vocab(m, "gpt-2"));
  }
}

}  // namespace epd::model::test
