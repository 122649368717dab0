// epd's tokenizers against llama.cpp (node-llama-cpp's prebuilt CPU build, tests/http/node/tokenize.mjs):
// a SentencePiece model trained by spm_train and a byte-level BPE learned here, each written into a GGUF
// llama.cpp loads (pre-tokenizers "gpt-2" and "llama-bpe" for the BPE), and a few hundred probe strings —
// ASCII, accents, CJK, emoji, whitespace runs, special-token spellings — tokenized with and without
// special-token parsing. epd must give llama.cpp's ids for every string, both from the GGUF and from the
// original tokenizer.model / tokenizer.json, and decode them to llama.cpp's text.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "epd/model/chat_template.hpp"
#include "epd/model/tokenizer_load.hpp"
#include "fixtures.hpp"
#include "llama_cpp_oracle.hpp"

namespace epd::model::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Every probe: the same ids with and without special-token parsing, and the same detokenized text.
void agree(const Tokenizer& epd, const json& oracle, const char* source) {
  const auto strings = probe_strings();
  REQUIRE(oracle.at("results").size() == strings.size());
  CHECK(epd.bos() == oracle.at("bos").get<TokenId>());
  CHECK(epd.eos() == oracle.at("eos").get<TokenId>());
  size_t equal = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    INFO(source << ": \"" << escape_text(strings[i]) << "\"");
    const json& r = oracle["results"][i];
    const auto plain = r.at("plain").get<std::vector<TokenId>>();
    const auto special = r.at("special").get<std::vector<TokenId>>();
    CHECK(token_ids(epd, strings[i], false) == plain);
    CHECK(token_ids(epd, strings[i], true) == special);
    const bool bpe = epd.kind() == "bpe";
    const std::string text = decode(epd, plain), text_special = decode(epd, special, true);
    // Lossless, except that SentencePiece gives the text after a split-out user-defined token its own
    // dummy-prefix space (llama.cpp's rule too: "x<tool>y" comes back as "x<tool> y").
    if (epd.kind() == "bpe" || strings[i].find("<tool>") == std::string::npos) CHECK(text == strings[i]);
    CHECK((bpe ? clean_spaces(text) : text) == r.at("text").get<std::string>());
    CHECK((bpe ? clean_spaces(text_special) : text_special) == r.at("text_special").get<std::string>());
    equal += token_ids(epd, strings[i], false) == plain && token_ids(epd, strings[i], true) == special;
  }
  CHECK(equal == strings.size());
  CHECK(strings.size() >= 250);
}

}  // namespace

TEST_CASE("SentencePiece tokenization equals llama.cpp's") {
  ScratchDir dir("tok_oracle_spm");
  const fs::path model = train_sentencepiece(dir.path());
  const fs::path gguf = dir.path() / "spm.gguf";
  write_tokenizer_gguf(gguf, sentencepiece_vocab(model));
  const json oracle = llama_cpp_tokens(gguf, dir.path(), probe_strings());
  auto from_gguf = load_tokenizer(gguf.string());
  REQUIRE(from_gguf.ok());
  agree(*from_gguf->tokenizer, oracle, "gguf");
  auto from_model = load_sentencepiece(read_all(model));
  REQUIRE(from_model.ok());
  agree(**from_model, oracle, "tokenizer.model");
}

TEST_CASE("byte-level BPE tokenization equals llama.cpp's") {
  ScratchDir dir("tok_oracle_bpe");
  const BpeModel m = train_bpe(tokenizer_corpus(), 400);
  for (const std::string pre : {"gpt-2", "llama-bpe"}) {
    INFO("tokenizer.ggml.pre = " << pre);
    const fs::path gguf = dir.path() / ("bpe-" + pre + ".gguf");
    write_tokenizer_gguf(gguf, bpe_vocab(m, pre));
    const json oracle = llama_cpp_tokens(gguf, dir.path(), probe_strings());
    auto from_gguf = load_tokenizer(gguf.string());
    REQUIRE(from_gguf.ok());
    agree(*from_gguf->tokenizer, oracle, "gguf");
    // tokenizer.json names BOS/EOS in tokenizer_config.json, as Hugging Face directories do.
    auto from_json = load_tokenizer_json(bpe_tokenizer_json(m, pre),
                                         R"({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})");
    REQUIRE(from_json.ok());
    agree(**from_json, oracle, "tokenizer.json");
  }
}

TEST_CASE("chat templates render as the checkpoints' Jinja templates do") {
  // Three families' templates as checkpoints ship them (tests/model/tokenizer/templates/), rendered by
  // epd (llama.cpp's engine) and by Hugging Face's Jinja engine: the same text.
  ScratchDir dir("tok_oracle_chat");
  using Turns = std::vector<ChatTurn>;
  const std::vector<Turns> conversations = {
      {{"user", "Hello!", false}},
      {{"system", "You are terse.", false}, {"user", "What is 2+2?", false}},
      {{"system", "  padded system  ", false},
       {"user", "  first\n", false},
       {"assistant", " four ", false},
       {"user", "caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80\n\nnext", false}},
      {{"user", "a", false},
       {"assistant", "b", false},
       {"user", "c", false},
       {"assistant", "d", false},
       {"user", "e", false}},
      {{"user", "two", false}, {"user", "users", false}},          // Llama-2 refuses
      {{"user", "ends", false}, {"assistant", "with me", false}},  // rendered as the template has it
  };
  const std::string node_dir = std::string(EPD_SOURCE_DIR) + "/tests/http/node";
  for (auto [file, bos, eos] : {std::tuple{"llama2.jinja", "<s>", "</s>"},
                                std::tuple{"llama3.jinja", "<|begin_of_text|>", "<|eot_id|>"},
                                std::tuple{"chatml.jinja", "", "<|im_end|>"}}) {
    INFO(file);
    const std::string tmpl = read_all(fs::path(EPD_SOURCE_DIR) / "tests/model/tokenizer/templates" / file);
    json spec = {
        {"template", tmpl}, {"bos_token", bos}, {"eos_token", eos}, {"conversations", json::array()}};
    for (const Turns& c : conversations) {
      json msgs = json::array();
      for (const ChatTurn& t : c) msgs.push_back({{"role", t.role}, {"content", t.text}});
      spec["conversations"].push_back(msgs);
    }
    std::ofstream(dir.path() / "spec.json") << spec.dump();
    const fs::path out = dir.path() / "rendered.json", err = dir.path() / "node.err";
    const std::string cmd = "timeout 60 node " + node_dir + "/render_chat.mjs --input " +
                            (dir.path() / "spec.json").string() + " --output " + out.string() + " >" +
                            err.string() + " 2>&1";
    if (std::system(cmd.c_str()) != 0) FAIL("render_chat.mjs failed: " + read_all(err));
    const json rendered = json::parse(read_all(out)).at("rendered");
    REQUIRE(rendered.size() == conversations.size());
    size_t compared = 0;
    for (size_t i = 0; i < conversations.size(); ++i) {
      INFO("conversation " << i);
      auto epd = render_chat_text(tmpl, conversations[i], bos, eos);
      const json& jinja = rendered[i];
      if (jinja.is_object()) {  // the template raised: epd refuses too
        CHECK_FALSE(epd.ok());
        continue;
      }
      REQUIRE(epd.ok());
      CHECK(*epd == jinja.get<std::string>());
      ++compared;
    }
    CHECK(compared >= 4);
  }
}

}  // namespace epd::model::test
