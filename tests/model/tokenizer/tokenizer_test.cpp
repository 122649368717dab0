// The tokenizers against themselves and their sources: the byte tokenizer is the reference model's, a GGUF
// vocabulary tokenizes like the file it came from, every probe string survives encode + decode, unsupported
// tokenizer.json features are refused by name. The comparison with llama.cpp is tokenizer_oracle_test.cpp.
#include <catch2/catch.hpp>
#include <fstream>

#include "epd/model/tokenizer.hpp"
#include "epd/model/tokenizer_load.hpp"
#include "fixtures.hpp"

namespace epd::model::test {
namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<TokenId> ids(const Tokenizer& t, std::string_view text, bool special) {
  auto r = t.encode(text, special);
  REQUIRE(r.ok());
  return *r;
}

std::unique_ptr<Tokenizer> bpe_from_json(const std::string& json) {
  auto t = load_tokenizer_json(json, "");
  if (!t) FAIL(t.error().detail);
  return std::move(*t);
}

// A tokenizer.json with the 256 byte characters, extra tokens and merges given (GPT-2's ByteLevel).
std::string tiny_json(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                      const std::string& more = "") {
  const BpeModel base = train_bpe("", 0);
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string s = base.tokens[b];
    std::string esc;
    for (char c : s) {
      if (c == '"' || c == '\\') esc.push_back('\\');
      esc.push_back(c);
    }
    vocab += "\"" + esc + "\":" + std::to_string(b) + ",";
  }
  for (size_t k = 0; k < extra.size(); ++k) vocab += "\"" + extra[k] + "\":" + std::to_string(256 + k) + ",";
  vocab.pop_back();
  std::string m;
  for (const auto& s : merges) m += "\"" + s + "\",";
  if (!m.empty()) m.pop_back();
  return R"({"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)" + more +
         R"("model":{"type":"BPE","vocab":{)" + vocab + "},\"merges\":[" + m + "]}}";
}

}  // namespace

TEST_CASE("the byte tokenizer gives the reference model's ids") {
  auto t = make_byte_tokenizer();
  for (const std::string& s : std::vector<std::string>{"hello", "caf\xC3\xA9", std::string("\0\xff", 2)}) {
    CHECK(ids(*t, s, true) == encode_text(s));
    const auto enc = encode_text(s);
    CHECK(decode(*t, enc) == decode_text(enc));
  }
  CHECK(t->vocab_size() == kVocab);
  CHECK(t->bos() == kBos);
  CHECK(t->eos() == kEos);
  CHECK(t->piece(kImage, false).empty());
}

TEST_CASE("the stream decoder emits whole UTF-8 characters only") {
  auto t = make_byte_tokenizer();
  const std::string text = "a\xC3\xA9\xF0\x9F\x98\x80z";  // a, é, 😀, z
  StreamDecoder d(*t);
  std::vector<std::string> outs;
  for (unsigned char c : text) outs.push_back(d.push(c));
  CHECK(outs == std::vector<std::string>{"a", "", "\xC3\xA9", "", "", "", "\xF0\x9F\x98\x80", "z"});
  CHECK(d.finish().empty());
  StreamDecoder cut(*t);
  CHECK(cut.push(0xF0).empty());
  CHECK(cut.push(0x9F).empty());
  CHECK(cut.finish() == "\xEF\xBF\xBD");
  StreamDecoder junk(*t);
  CHECK(junk.push(0xFF) == "\xFF");  // never part of a character: passed on at once
}

TEST_CASE("sentencepiece round trips every probe string") {
  ScratchDir dir("spm_roundtrip");
  auto tok = load_sentencepiece(read_all(train_sentencepiece(dir.path())));
  REQUIRE(tok.ok());
  const Tokenizer& t = **tok;
  CHECK(t.kind() == "sentencepiece");
  CHECK(t.strips_leading_space());
  for (const std::string& s : probe_strings()) {
    INFO(s);
    // Text after the user-defined <tool> is encoded as a fragment of its own, dummy-prefix space included
    // (as llama.cpp does): its round trip gains that space, checked below.
    const std::string want = s == "x<tool>y" ? "x<tool> y" : s;
    if (s.find("<tool>") != std::string::npos && s != "x<tool>y") continue;
    const auto enc = ids(t, s, false);
    CHECK(decode(t, enc) == want);
    StreamDecoder d(t);
    std::string streamed;
    for (TokenId id : enc) streamed += d.push(id);
    CHECK(streamed + d.finish() == want);
  }
  const auto tool = t.special_id("<tool>");
  REQUIRE(tool.has_value());
  CHECK(t.type(*tool) == TokenType::user_defined);
  const auto split = ids(t, "x<tool>y", false);
  CHECK(std::count(split.begin(), split.end(), *tool) == 1);  // matched without special parsing
}

TEST_CASE("a GGUF llama vocabulary tokenizes like its tokenizer.model") {
  ScratchDir dir("spm_gguf");
  const auto model = train_sentencepiece(dir.path());
  auto original = load_sentencepiece(read_all(model));
  auto from_vocab = tokenizer_from_vocab(sentencepiece_vocab(model));
  REQUIRE(original.ok());
  REQUIRE(from_vocab.ok());
  CHECK((*from_vocab)->vocab_size() == (*original)->vocab_size());
  CHECK((*from_vocab)->bos() == (*original)->bos());
  CHECK((*from_vocab)->eos() == (*original)->eos());
  for (const std::string& s : probe_strings()) {
    INFO(s);
    CHECK(ids(**from_vocab, s, true) == ids(**original, s, true));
    CHECK(ids(**from_vocab, s, false) == ids(**original, s, false));
  }
}

TEST_CASE("sentencepiece control tokens are parsed only when asked") {
  ScratchDir dir("spm_special");
  auto tok = load_sentencepiece(read_all(train_sentencepiece(dir.path())));
  REQUIRE(tok.ok());
  const Tokenizer& t = **tok;
  const auto start = t.special_id("<|im_start|>");
  REQUIRE(start.has_value());
  CHECK(t.type(*start) == TokenType::control);
  const auto parsed = ids(t, "<|im_start|>user", true);
  CHECK(parsed.front() == *start);
  CHECK(decode(t, parsed) == "user");                          // the control token renders as nothing...
  CHECK(decode(t, parsed, true).starts_with("<|im_start|>"));  // ...unless asked
  const auto plain = ids(t, "<|im_start|>user", false);
  CHECK(std::find(plain.begin(), plain.end(), *start) == plain.end());
  CHECK(decode(t, plain) == "<|im_start|>user");
  CHECK(ids(t, "<s>", true) == std::vector<TokenId>{*t.bos()});
}

TEST_CASE("byte-level BPE from tokenizer.json round trips and matches its GGUF vocabulary") {
  const BpeModel m = train_bpe(tokenizer_corpus(), 300);
  for (const std::string pre : {"gpt-2", "llama-bpe"}) {
    INFO(pre);
    auto json = bpe_from_json(bpe_tokenizer_json(m, pre));
    auto gguf = tokenizer_from_vocab(bpe_vocab(m, pre));
    REQUIRE(gguf.ok());
    CHECK(json->kind() == "bpe");
    CHECK(json->vocab_size() == m.tokens.size());
    size_t merged = 0;
    for (const std::string& s : probe_strings()) {
      INFO(s);
      const auto enc = ids(*json, s, false);
      merged += enc.size() < s.size();
      CHECK(decode(*json, enc) == s);
      CHECK(ids(**gguf, s, false) == enc);
      CHECK(ids(**gguf, s, true) == ids(*json, s, true));
    }
    CHECK(merged > 100);  // the merges do shorten text
  }
}

TEST_CASE("BPE applies the lowest-ranked merge first") {
  auto first_bc = bpe_from_json(tiny_json({"ab", "bc"}, {"b c", "a b"}));
  auto first_ab = bpe_from_json(tiny_json({"ab", "bc"}, {"a b", "b c"}));
  CHECK(ids(*first_bc, "abc", false) == std::vector<TokenId>{'a', 257});  // a + bc
  CHECK(ids(*first_ab, "abc", false) == std::vector<TokenId>{256, 'c'});  // ab + c
  // Ties cannot happen within one rank; across a word the leftmost pair of the best rank merges first.
  CHECK(ids(*first_ab, "abab", false) == std::vector<TokenId>{256, 256});
}

TEST_CASE("BPE splits control tokens only when asked and user-defined ones always") {
  const BpeModel m = train_bpe(tokenizer_corpus(), 100);
  auto t = bpe_from_json(bpe_tokenizer_json(m, "gpt-2"));
  const auto start = t->special_id("<|im_start|>");
  const auto tool = t->special_id("<tool>");
  REQUIRE(start.has_value());
  REQUIRE(tool.has_value());
  CHECK(t->type(*start) == TokenType::control);
  CHECK(t->type(*tool) == TokenType::user_defined);
  const auto parsed = ids(*t, "x<|im_start|>y<tool>z", true);
  const auto plain = ids(*t, "x<|im_start|>y<tool>z", false);
  CHECK(std::count(parsed.begin(), parsed.end(), *start) == 1);
  CHECK(std::count(plain.begin(), plain.end(), *start) == 0);
  CHECK(std::count(parsed.begin(), parsed.end(), *tool) == 1);
  CHECK(std::count(plain.begin(), plain.end(), *tool) == 1);
  CHECK(decode(*t, plain) == "x<|im_start|>y<tool>z");
  CHECK(decode(*t, parsed) == "xy<tool>z");
}

TEST_CASE("ignore_merges takes a word that is a token whole") {
  // "hello" is a token but no merge chain reaches it.
  const std::string vocab = R"("h":0,"e":1,"l":2,"o":3,"hello":4)";
  auto with = [&](bool ignore) {
    return bpe_from_json(R"({"pre_tokenizer":{"type":"ByteLevel","use_regex":true},"model":{"type":"BPE",)"
                         R"("ignore_merges":)" +
                         std::string(ignore ? "true" : "false") + R"(,"vocab":{)" + vocab +
                         R"(},"merges":[]}})");
  };
  CHECK(ids(*with(true), "hello", false) == std::vector<TokenId>{4});
  CHECK(ids(*with(false), "hello", false) == std::vector<TokenId>{0, 1, 2, 2, 3});
}

TEST_CASE("invalid UTF-8 is tokenized as U+FFFD and a missing byte is an error") {
  const BpeModel m = train_bpe(tokenizer_corpus(), 50);
  auto t = bpe_from_json(bpe_tokenizer_json(m, "gpt-2"));
  CHECK(ids(*t,
            "a\xFF"
            "b",
            false) == ids(*t,
                          "a\xEF\xBF\xBD"
                          "b",
                          false));
  auto partial = load_tokenizer_json(
      R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}})",
      "");
  REQUIRE(partial.ok());
  CHECK(ids(**partial, "abab", false) == std::vector<TokenId>{0, 1, 0, 1});  // "ab" is no token: a, b
  auto missing = (*partial)->encode("abc", false);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().detail, Catch::Contains("no token for byte 0x63"));
}

TEST_CASE("tokenizer.json features epd does not support are refused by name") {
  const std::string ok_pre = R"("pre_tokenizer":{"type":"ByteLevel"},)";
  const std::string ok_model = R"("model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]})";
  auto refused = [](const std::string& json) {
    auto t = load_tokenizer_json(json, "");
    REQUIRE_FALSE(t.ok());
    CHECK(t.error().code == protocol::ErrorCode::config_error);
    return t.error().detail;
  };
  CHECK_THAT(refused("{" + ok_pre + R"("normalizer":{"type":"NFC"},)" + ok_model + "}"),
             Catch::Contains("normalizer NFC"));
  CHECK_THAT(refused(R"({"pre_tokenizer":{"type":"Metaspace"},)" + ok_model + "}"),
             Catch::Contains("Metaspace"));
  CHECK_THAT(refused(R"({"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":true},)" + ok_model + "}"),
             Catch::Contains("add_prefix_space"));
  CHECK_THAT(refused("{" + ok_pre + R"("model":{"type":"WordPiece","vocab":{"a":0}}})"),
             Catch::Contains("WordPiece"));
  CHECK_THAT(
      refused("{" + ok_pre + R"("model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":[]}})"),
      Catch::Contains("byte_fallback"));
  CHECK_THAT(refused("{" + ok_pre + R"("model":{"type":"BPE","vocab":{"a":0,"b":2},"merges":[]}})"),
             Catch::Contains("missing"));
  CHECK_THAT(refused("{" + ok_pre + R"("model":{"type":"BPE","vocab":{"a":0},"merges":["a b c"]}})"),
             Catch::Contains("a b c"));
  CHECK_THAT(
      refused("{" + ok_pre + R"("added_tokens":[{"id":2,"content":"<x>","lstrip":true}],)" + ok_model + "}"),
      Catch::Contains("lstrip"));
  CHECK_THAT(refused("{" + ok_pre + R"("added_tokens":[{"id":0,"content":"<x>"}],)" + ok_model + "}"),
             Catch::Contains("both"));
  CHECK_THAT(refused("{" + ok_pre + R"("decoder":{"type":"WordPiece"},)" + ok_model + "}"),
             Catch::Contains("decoder WordPiece"));
  CHECK_THAT(refused("{" + ok_pre + R"("post_processor":{"type":"RobertaProcessing"},)" + ok_model + "}"),
             Catch::Contains("RobertaProcessing"));
  CHECK_THAT(
      refused(R"({"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":)"
              R"({"Regex":"(unclosed"},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]},)" +
              ok_model + "}"),
      Catch::Contains("does not compile"));
  CHECK_THAT(refused(R"({"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":)"
                     R"({"Regex":"a"},"behavior":"Removed"},{"type":"ByteLevel","use_regex":false}]},)" +
                     ok_model + "}"),
             Catch::Contains("Isolated"));
  CHECK_THAT(refused("{not json"), Catch::Contains("malformed JSON"));
  CHECK_THAT(refused("[1, 2]"), Catch::Contains("not a JSON object"));
}

TEST_CASE("a catastrophic pre-tokenizer regex ends in an error, not a hang") {
  auto t = load_tokenizer_json(
      R"({"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(a+)+$"},)"
      R"("behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]},"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]}})",
      "");
  REQUIRE(t.ok());
  auto r = (*t)->encode(std::string(40, 'a') + "b", false);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().detail, Catch::Contains("limit"));
}

}  // namespace epd::model::test
