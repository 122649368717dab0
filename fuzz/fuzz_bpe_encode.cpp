// The byte-level BPE encoder (special-token split, PCRE2 pre-tokenizer, merges) on hostile text, for both
// pre-tokenizers epd ships (GPT-2's and Llama-3's with ignore_merges): the first byte picks the tokenizer
// and whether special tokens are parsed, the rest is the text. Invariants: with every byte in the
// vocabulary any text encodes; ids lie inside the vocabulary; decoding gives the text back exactly (invalid
// UTF-8 as U+FFFD, what the encoder saw), all at once and through the streaming decoder alike.
#include <memory>

#include "byte_level.hpp"
#include "epd/model/tokenizer_load.hpp"
#include "fuzz_check.hpp"

using namespace epd::model;

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
      continue;
    }
    out.push_back(static_cast<char>(c));
  }
  return out + "\"";
}

std::unique_ptr<Tokenizer> make(bool llama3) {
  using detail::byte_char;
  std::string vocab;
  for (int b = 0; b < 256; ++b)
    vocab += quoted(byte_char(static_cast<unsigned char>(b))) + ":" + std::to_string(b) + ",";
  const std::vector<std::pair<std::string, std::string>> merges = {{byte_char(' '), "t"},
                                                                   {"h", "e"},
                                                                   {byte_char(' ') + "t", "he"},
                                                                   {"i", "n"},
                                                                   {"a", "n"},
                                                                   {"e", "r"},
                                                                   {byte_char(' '), "a"},
                                                                   {"o", "n"},
                                                                   {byte_char(0xE6), byte_char(0x9D)},
                                                                   {"1", "2"},
                                                                   {"12", "3"}};
  std::string m;
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab += quoted(a + b) + ":" + std::to_string(id++) + ",";
    m += quoted(a + " " + b) + ",";
  }
  vocab += quoted("hello") + ":" + std::to_string(id++);
  m.pop_back();
  const std::string added = R"("added_tokens":[{"id":)" + std::to_string(id) +
                            R"(,"content":"<|im_start|>","special":true},{"id":)" + std::to_string(id + 1) +
                            R"(,"content":"<tool>","special":false}],)";
  const std::string pre =
      llama3
          ? R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]})"
          : R"({"type":"ByteLevel","use_regex":true})";
  auto t = load_tokenizer_json(R"({"pre_tokenizer":)" + pre + "," + added +
                                   R"("model":{"type":"BPE","ignore_merges":)" + (llama3 ? "true" : "false") +
                                   R"(,"vocab":{)" + vocab + R"(},"merges":[)" + m + "]}}",
                               "");
  FUZZ_CHECK(t.ok());
  return std::move(*t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Tokenizer> gpt2 = make(false), llama3 = make(true);
  epd::fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.take<uint8_t>();
  const Tokenizer& t = mode & 1 ? *llama3 : *gpt2;
  const bool special = mode & 2;
  const std::string_view text = in.rest_text();
  auto ids = t.encode(text, special);
  FUZZ_CHECK(ids.ok());
  for (TokenId id : *ids) FUZZ_CHECK(id < t.vocab_size());
  const std::string expect = detail::sanitize_utf8(text);
  FUZZ_CHECK(decode(t, *ids, true) == expect);
  StreamDecoder d(t, true);
  std::string streamed;
  for (TokenId id : *ids) streamed += d.push(id);
  FUZZ_CHECK(streamed + d.finish() == expect);
  return 0;
}
