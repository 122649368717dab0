// PromptCodec: the reference model's codec is exactly today's byte functions; a checkpoint's builds prompts
// and chats with its tokenizer and template, stops at EOS and the turn end, and refuses what it cannot run.
#include <catch2/catch.hpp>

#include "epd/model/llama.hpp"
#include "epd/model/prompt_codec.hpp"
#include "fixtures.hpp"

namespace epd::model::test {
namespace {

std::vector<ChatTurn> codec_conversation() {
  return {{"system", "Be brief.", false}, {"user", "What is 2+2?", false}};
}

ModelConfig checkpoint_cfg(uint32_t vocab, uint32_t max_seq = 256) {
  ModelConfig cfg;
  cfg.name = "fixture";
  cfg.checkpoint = "fixture";
  cfg.vocab = vocab;
  cfg.max_seq = max_seq;
  return cfg;
}

std::unique_ptr<Tokenizer> fresh(const VocabMetadata& v) {
  auto t = tokenizer_from_vocab(v);
  REQUIRE(t.ok());
  return std::move(*t);
}

}  // namespace

TEST_CASE("the reference model's codec is the byte tokenizer and template of before") {
  const ModelConfig cfg = *preset("tiny");
  auto codec = PromptCodec::for_model(cfg);
  REQUIRE(codec.ok());
  const PromptCodec& c = **codec;
  CHECK(c.tokenizer().kind() == "byte");
  for (auto image : {std::optional<MediaDims>{}, std::optional<MediaDims>{MediaDims{16, 8}}}) {
    std::vector<MediaDims> images;
    if (image) images.push_back(*image);
    CHECK(*c.prompt("hello", images) == *build_prompt(cfg, "hello", image));
    const auto turns = codec_conversation();
    CHECK(*c.chat(turns, images) == *build_prompt(cfg, *render_chat(cfg, turns), image));
  }
  CHECK_FALSE(c.prompt(std::string(cfg.max_seq, 'x'), {}).ok());
  const std::vector<TokenId> out = {'h', 'i', kEos, 'x'};
  CHECK(c.text(out) == decode_text(out));
  CHECK(c.ends_generation(kEos));
  CHECK_FALSE(c.ends_generation('a'));
}

TEST_CASE("a SentencePiece checkpoint's codec uses its tokenizer and Llama-2 template") {
  ScratchDir dir("codec_spm");
  VocabMetadata v = sentencepiece_vocab(train_sentencepiece(dir.path()));
  v.chat_template = "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}";
  auto tok = tokenizer_from_vocab(v);
  REQUIRE(tok.ok());
  const Tokenizer& t = **tok;
  const auto expect_prompt = [&](std::string_view s) {
    std::vector<TokenId> ids{*t.bos()};
    auto body = t.encode(s, false);
    ids.insert(ids.end(), body->begin(), body->end());
    return ids;
  };
  auto tmpl = ChatTemplate::make(v.chat_template, t);
  REQUIRE(tmpl.ok());
  const auto chat_ids = *encode_chat(t, *(*tmpl)->render(codec_conversation()));
  const auto prompt_ids = expect_prompt("caf\xC3\xA9 <s> \xE6\x9D\xB1\xE4\xBA\xAC");
  auto again = tokenizer_from_vocab(v);
  const ModelConfig cfg = checkpoint_cfg(t.vocab_size());
  auto codec = PromptCodec::for_tokenizer(cfg, {std::move(*again), v.chat_template});
  REQUIRE(codec.ok());
  const PromptCodec& c = **codec;
  REQUIRE(c.chat_template());
  CHECK(c.chat_template()->source() == v.chat_template);
  CHECK(*c.prompt("caf\xC3\xA9 <s> \xE6\x9D\xB1\xE4\xBA\xAC", {}) == prompt_ids);  // "<s>" stays text
  CHECK(*c.chat(codec_conversation(), {}) == chat_ids);
  CHECK(c.ends_generation(*t.eos()));
  auto hello = t.encode("hello world", false);
  std::vector<TokenId> generated = *hello;
  generated.push_back(*t.eos());
  generated.push_back(*hello->begin());
  CHECK(c.text(generated) == "hello world");
  const MediaDims one_image[] = {{8, 8}};
  auto image = c.prompt("x", one_image);
  REQUIRE_FALSE(image.ok());
  CHECK_THAT(image.error().detail, Catch::Contains("takes no images"));
  auto small = PromptCodec::for_tokenizer(checkpoint_cfg(t.vocab_size(), 8), {fresh(v), ""});
  REQUIRE(small.ok());
  CHECK_FALSE((*small)->prompt("a long prompt that cannot fit eight tokens at all", {}).ok());
  auto narrow = PromptCodec::for_tokenizer(checkpoint_cfg(t.vocab_size() - 1), {fresh(v), ""});
  REQUIRE_FALSE(narrow.ok());
  CHECK_THAT(narrow.error().detail, Catch::Contains("embedding"));
}

TEST_CASE("a BPE checkpoint without a template chats in ChatML and stops at the turn end") {
  const BpeModel m = train_bpe(tokenizer_corpus(), 100);
  auto tok = tokenizer_from_vocab(bpe_vocab(m, "gpt-2"));
  REQUIRE(tok.ok());
  const TokenId im_end = *(*tok)->special_id("<|im_end|>");
  // No template: llama.cpp's ChatML default, as llama-server has it.
  const auto expect = *encode_chat(**tok, *(*ChatTemplate::make("", **tok))->render(codec_conversation()));
  const ModelConfig cfg = checkpoint_cfg((*tok)->vocab_size() + 64);  // a padded embedding
  auto codec = PromptCodec::for_tokenizer(cfg, {std::move(*tok), ""});
  REQUIRE(codec.ok());
  const PromptCodec& c = **codec;
  CHECK(*c.chat(codec_conversation(), {}) == expect);
  CHECK(c.ends_generation(im_end));
  CHECK(c.prompt("hi", {})->size() == c.tokenizer().encode("hi", false)->size());  // no BOS
  CHECK_FALSE(c.prompt("", {}).ok());

  // A template that does not parse: completions only, chats a config_error.
  auto broken = PromptCodec::for_tokenizer(checkpoint_cfg(4096), {fresh(bpe_vocab(m, "gpt-2")), "{% if %}"});
  REQUIRE(broken.ok());
  CHECK((*broken)->prompt("hello", {}).ok());
  auto chat = (*broken)->chat(codec_conversation(), {});
  REQUIRE_FALSE(chat.ok());
  CHECK(chat.error().code == protocol::ErrorCode::config_error);
}

TEST_CASE("a GGUF checkpoint's codec comes from the checkpoint path") {
  ScratchDir dir("codec_gguf");
  VocabMetadata v = bpe_vocab(train_bpe(tokenizer_corpus(), 100), "llama-bpe");
  v.chat_template = "{{ '<|im_start|>' + messages[0]['role'] }}";
  const auto file = dir.path() / "model.gguf";
  write_tokenizer_gguf(file, v);
  auto cfg = read_checkpoint_config(file.string());
  if (!cfg) FAIL(cfg.error().detail);
  auto codec = PromptCodec::for_model(*cfg);
  if (!codec) FAIL(codec.error().detail);
  CHECK((*codec)->tokenizer().kind() == "bpe");
  REQUIRE((*codec)->chat_template());
  CHECK((*codec)->chat_template()->source() == v.chat_template);
  CHECK((*codec)->tokenizer().vocab_size() == v.tokens.size());
  ModelConfig missing = *cfg;
  missing.checkpoint = (dir.path() / "nowhere.gguf").string();
  CHECK_FALSE(PromptCodec::for_model(missing).ok());
}

TEST_CASE("a checkpoint's generation text streams whole characters and ends at the end token") {
  ScratchDir dir("codec_stream");
  const VocabMetadata v = sentencepiece_vocab(train_sentencepiece(dir.path()));
  auto codec = PromptCodec::for_tokenizer(checkpoint_cfg(uint32_t(v.tokens.size())), {fresh(v), ""});
  REQUIRE(codec.ok());
  const PromptCodec& c = **codec;
  // Accents, CJK and an emoji the corpus may lack: some come out as byte tokens, one byte per token.
  const std::string text = "caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80 words  and\tspaces";
  auto ids = c.tokenizer().encode(text, false);
  REQUIRE(ids.ok());
  std::vector<TokenId> generated = *ids;
  const size_t text_tokens = generated.size();
  generated.push_back(*c.tokenizer().eos());
  generated.push_back(ids->front());  // after the end: not part of the answer
  GenerationText stream(*codec);
  std::string joined;
  size_t bytes_at_first = 0;
  for (size_t i = 0; i < generated.size(); ++i) {
    const std::string piece = stream.push(generated[i]);
    // Every push is whole characters: it never ends inside a UTF-8 sequence.
    size_t k = piece.size();
    while (k > 0 && (static_cast<unsigned char>(piece[k - 1]) & 0xC0) == 0x80) --k;
    if (k > 0) {
      const auto lead = static_cast<unsigned char>(piece[k - 1]);
      const size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      CHECK(piece.size() - (k - 1) == len);
    }
    if (i == 0) bytes_at_first = piece.size();
    if (i > text_tokens) CHECK(piece.empty());
    joined += piece;
  }
  joined += stream.finish();
  CHECK(joined == text);  // the dummy-prefix space is dropped once, at the start
  CHECK(joined == c.text(generated));
  CHECK(bytes_at_first > 0);
  CHECK(text_tokens > 10);

  // The reference model's text is its byte decoding, token by token, as before.
  GenerationText bytes(nullptr);
  CHECK(bytes.push('h') + bytes.push('i') + bytes.finish() == "hi");
}

}  // namespace epd::model::test
