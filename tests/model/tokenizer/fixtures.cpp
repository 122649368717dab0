#include "fixtures.hpp"

#include <unistd.h>

#include <sentencepiece_processor.h>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "epd/model/rng.hpp"
#include "gguf_writer.hpp"

namespace epd::model::test {
namespace fs = std::filesystem;

ScratchDir::ScratchDir(const std::string& what) {
  path_ = fs::temp_directory_path() / ("epd_" + what + "_" + std::to_string(getpid()));
  fs::remove_all(path_);
  fs::create_directories(path_);
}
ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

namespace {

const std::vector<std::string>& words() {
  static const std::vector<std::string> w = {
      "the",       "quick",    "brown",   "fox",        "jumps",  "over",     "lazy",       "dog",
      "tokenizer", "model",    "serving", "prefill",    "decode", "router",   "encoder",    "cache",
      "page",      "transfer", "engine",  "llama",      "qwen",   "café",     "naïve",      "résumé",
      "façade",    "über",     "straße",  "élan",       "déjà",   "vu",       "東京",       "大阪",
      "日本語",    "中文",     "漢字",    "こんにちは", "世界",   "한국어",   "안녕하세요", "Привет",
      "мир",       "Ελληνικά", "😀",       "🚀",          "🎉",      "👍🏽", "42",         "3.14",
      "1000000",   "2026",     "x86-64",  "C++20",      "don't",  "it's",     "we're",      "they've",
      "I'm",       "you'll",   "he'd",    "Hello,",     "world!", "(yes)",    "#include",   "a+b=c"};
  return w;
}

}  // namespace

std::string tokenizer_corpus() {
  SplitMix64 rng(7);
  std::string out;
  const auto& w = words();
  for (int line = 0; line < 400; ++line) {
    const int n = 3 + static_cast<int>(rng.next() % 12);
    std::string s = line % 7 == 0 ? "  " : "";
    for (int i = 0; i < n; ++i) {
      if (i > 0) s += (line % 5 == 0 && i == 1) ? "\t" : " ";
      s += w[rng.next() % w.size()];
    }
    if (line % 11 == 0) s += "   ";
    out += s + "\n";
  }
  return out;
}

std::vector<std::string> probe_strings() {
  std::vector<std::string> p = {
      "Hello world",
      "hello",
      " hello",
      "  hello",
      "hello ",
      "hello   ",
      "a  b",
      "a   b    c",
      "\tindented\ttabs",
      "line one\nline two",
      "para\n\nnext",
      "\n",
      "\n\n\n",
      " ",
      "   ",
      "x",
      "don't stop, it's fine; we're here and they've gone. I'm sure you'll see he'd agree",
      "DON'T SHOUT IT'S LOUD",
      "café naïve résumé façade über straße élan déjà vu",
      "Ångström Ærø Œuvre ñandú",
      "東京と大阪",
      "日本語の文章です。",
      "中文漢字测试",
      "こんにちは世界",
      "한국어 안녕하세요",
      "Привет, мир!",
      "Ελληνικά γράμματα",
      "😀🚀🎉",
      "thumbs 👍🏽 up",
      "family 👨‍👩‍👧 emoji",
      "flags 🇫🇷🇯🇵",
      "3.14159 and 2026 and 1000000",
      "12345678901234567890",
      "x86-64 C++20 a+b=c #include <vector>",
      "(nested [brackets {braces}])",
      "email@example.com https://example.com/path?q=1&r=2",
      "mixed 東京 café 😀 42",
      "<|im_start|>user\nhi<|im_end|>",
      "before<|im_start|>after",
      "<|im_start|><|im_end|>",
      "<s>not special</s>",
      "<|endoftext|>",
      "text <|endoftext|> more",
      "<|im_start",
      "x<tool>y",
      "<tool> starts",
      "ends <tool>",
      "<tool><|im_start|><tool>",
      "im_end|>",
      "ünïcödé wörds",
      "tab\tand  spaces \t mixed",
      "trailing newline\n",
      "\r\nwindows\r\nlines",
      "zero\u200Bwidth",
      "non\u00A0breaking",
      "ideographic\u3000space",
      "math ∑ ∫ √ ∞ ≠",
      "arrows → ← ↑ ↓",
      "quotes “curly” ‘single’ «guillemets»",
      "a'b a's a're",
      "'s 't 're",
      "___underscores___ and ---dashes---",
      "1,000,000.00",
      "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz",
  };
  // Corpus lines and word pairs: what the vocabularies know well.
  const std::string corpus = tokenizer_corpus();
  size_t start = 0;
  for (int i = 0; i < 120 && start < corpus.size(); ++i) {
    const size_t end = corpus.find('\n', start);
    p.push_back(corpus.substr(start, end - start));
    start = end + 1;
  }
  const auto& w = words();
  for (size_t i = 0; i < w.size(); ++i) {
    p.push_back(w[i]);
    p.push_back(w[i] + " " + w[(i * 7 + 3) % w.size()]);
  }
  return p;
}

fs::path train_sentencepiece(const fs::path& dir) {
  const fs::path corpus = dir / "corpus.txt";
  std::ofstream(corpus) << tokenizer_corpus();
  const std::string cmd = std::string(EPD_SPM_TRAIN) + " --input=" + corpus.string() +
                          " --model_prefix=" + (dir / "spm").string() +
                          " --vocab_size=700 --model_type=bpe --byte_fallback=true"
                          " --normalization_rule_name=identity --remove_extra_whitespaces=false"
                          " --add_dummy_prefix=true --allow_whitespace_only_pieces=true --split_digits=true"
                          " --hard_vocab_limit=false --character_coverage=1.0 --num_threads=1"
                          " --control_symbols='<|im_start|>,<|im_end|>' --user_defined_symbols='<tool>' "
                          "--minloglevel=2 >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  REQUIRE(fs::exists(dir / "spm.model"));
  return dir / "spm.model";
}

VocabMetadata sentencepiece_vocab(const fs::path& model_file) {
  sentencepiece::SentencePieceProcessor spm;
  REQUIRE(spm.Load(model_file.string()).ok());
  VocabMetadata v;
  v.model = "llama";
  for (int id = 0; id < spm.GetPieceSize(); ++id) {
    v.tokens.push_back(spm.IdToPiece(id));
    v.scores.push_back(spm.GetScore(id));
    int32_t t = 1;
    if (spm.IsControl(id))
      t = 3;
    else if (spm.IsUnknown(id))
      t = 2;
    else if (spm.IsByte(id))
      t = 6;
    else if (spm.IsUnused(id))
      t = 5;
    else if (spm.IdToPiece(id) == "<tool>")
      t = 4;  // user-defined: the processor does not say so
    v.token_types.push_back(t);
  }
  v.bos = static_cast<uint32_t>(spm.bos_id());
  v.eos = static_cast<uint32_t>(spm.eos_id());
  v.unk = static_cast<uint32_t>(spm.unk_id());
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

namespace {

std::string byte_char(unsigned char b) {  // GPT-2's byte-to-unicode, written out again for the test
  uint32_t cp = b;
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  if (!printable) {
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; ++c)
      if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

}  // namespace

BpeModel train_bpe(const std::string& corpus, size_t n_merges) {
  // Words: a run of non-spaces with the space before it, or a run of whitespace.
  std::map<std::vector<std::string>, size_t> words;
  for (size_t i = 0; i < corpus.size();) {
    size_t j = i;
    if (corpus[j] == ' ' && j + 1 < corpus.size() && !isspace(static_cast<unsigned char>(corpus[j + 1]))) ++j;
    const bool space = isspace(static_cast<unsigned char>(corpus[j]));
    while (j < corpus.size() && static_cast<bool>(isspace(static_cast<unsigned char>(corpus[j]))) == space)
      ++j;
    std::vector<std::string> syms;
    for (size_t k = i; k < j; ++k) syms.push_back(byte_char(static_cast<unsigned char>(corpus[k])));
    ++words[syms];
    i = j;
  }
  BpeModel m;
  for (int b = 0; b < 256; ++b) m.tokens.push_back(byte_char(static_cast<unsigned char>(b)));
  for (size_t step = 0; step < n_merges; ++step) {
    std::map<std::pair<std::string, std::string>, size_t> pairs;
    for (const auto& [syms, n] : words)
      for (size_t k = 0; k + 1 < syms.size(); ++k) pairs[{syms[k], syms[k + 1]}] += n;
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;  // ties: the first in map order
    const auto [a, b] = best->first;
    m.merges.push_back({a, b});
    m.tokens.push_back(a + b);
    std::map<std::vector<std::string>, size_t> merged;
    for (const auto& [syms, n] : words) {
      std::vector<std::string> out;
      for (size_t k = 0; k < syms.size(); ++k) {
        if (k + 1 < syms.size() && syms[k] == a && syms[k + 1] == b) {
          out.push_back(a + b);
          ++k;
        } else {
          out.push_back(syms[k]);
        }
      }
      merged[out] += n;
    }
    words = std::move(merged);
  }
  m.specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (const auto& s : m.specials) m.tokens.push_back(s);
  m.user_token = "<tool>";
  m.tokens.push_back(m.user_token);
  return m;
}

std::string bpe_tokenizer_json(const BpeModel& m, const std::string& pre) {
  using nlohmann::json;
  json vocab = json::object();
  const size_t n_normal = m.tokens.size() - m.specials.size() - 1;
  for (size_t id = 0; id < n_normal; ++id) vocab[m.tokens[id]] = id;
  json merges = json::array();
  for (const auto& [a, b] : m.merges) merges.push_back(a + " " + b);
  json added = json::array();
  for (size_t k = 0; k < m.specials.size(); ++k)
    added.push_back({{"id", n_normal + k},
                     {"content", m.specials[k]},
                     {"special", true},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false},
                     {"normalized", false}});
  added.push_back(
      {{"id", m.tokens.size() - 1}, {"content", m.user_token}, {"special", false}, {"normalized", false}});
  json root = {{"version", "1.0"},      {"truncation", nullptr}, {"padding", nullptr},
               {"added_tokens", added}, {"normalizer", nullptr}, {"decoder", {{"type", "ByteLevel"}}}};
  if (pre == "llama-bpe") {
    root["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", false}}}}};
  } else {
    root["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  }
  root["post_processor"] = nullptr;
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", pre == "llama-bpe"},
                   {"vocab", vocab},
                   {"merges", merges}};
  return root.dump();
}

VocabMetadata bpe_vocab(const BpeModel& m, const std::string& pre) {
  VocabMetadata v;
  v.model = "gpt2";
  v.pre = pre;
  v.tokens = m.tokens;
  const size_t n_normal = m.tokens.size() - m.specials.size() - 1;
  v.token_types.assign(m.tokens.size(), 1);
  for (size_t k = 0; k < m.specials.size(); ++k) v.token_types[n_normal + k] = 3;
  v.token_types.back() = 4;
  for (const auto& [a, b] : m.merges) v.merges.push_back(a + " " + b);
  v.bos = static_cast<uint32_t>(n_normal);  // <|endoftext|>
  v.eos = static_cast<uint32_t>(n_normal);
  v.add_bos = false;
  return v;
}

void write_tokenizer_gguf(const fs::path& path, const VocabMetadata& v) {
  testing::GgufWriter w;
  constexpr uint32_t kHidden = 32, kFfn = 64, kHeads = 2;
  const uint64_t n_vocab = v.tokens.size();
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "epd tokenizer fixture");
  w.set_u32("llama.context_length", 256);
  w.set_u32("llama.embedding_length", kHidden);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.feed_forward_length", kFfn);
  w.set_u32("llama.attention.head_count", kHeads);
  w.set_u32("llama.attention.head_count_kv", kHeads);
  w.set_u32("llama.rope.dimension_count", kHidden / kHeads);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(n_vocab));
  w.set_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_strings("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.set_f32s("tokenizer.ggml.scores", v.scores);
  if (!v.token_types.empty()) w.set_i32s("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) w.set_strings("tokenizer.ggml.merges", v.merges);
  if (v.bos) w.set_u32("tokenizer.ggml.bos_token_id", *v.bos);
  if (v.eos) w.set_u32("tokenizer.ggml.eos_token_id", *v.eos);
  if (v.unk) w.set_u32("tokenizer.ggml.unknown_token_id", *v.unk);
  if (v.add_bos) w.set_bool("tokenizer.ggml.add_bos_token", *v.add_bos);
  if (v.add_space_prefix) w.set_bool("tokenizer.ggml.add_space_prefix", *v.add_space_prefix);
  if (!v.chat_template.empty()) w.set_string("tokenizer.chat_template", v.chat_template);
  SplitMix64 rng(11);
  auto tensor = [&](const std::string& name, std::vector<uint64_t> ne, float scale, float offset = 0) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    std::vector<float> data(n);
    for (float& x : data) x = offset + scale * rng.uniform_pm1();
    w.add_f32(name, std::move(ne), data);
  };
  tensor("token_embd.weight", {kHidden, n_vocab}, 0.1f);
  tensor("output_norm.weight", {kHidden}, 0.1f, 1.0f);
  tensor("output.weight", {kHidden, n_vocab}, 0.1f);
  tensor("blk.0.attn_norm.weight", {kHidden}, 0.1f, 1.0f);
  tensor("blk.0.attn_q.weight", {kHidden, kHidden}, 0.1f);
  tensor("blk.0.attn_k.weight", {kHidden, kHidden}, 0.1f);
  tensor("blk.0.attn_v.weight", {kHidden, kHidden}, 0.1f);
  tensor("blk.0.attn_output.weight", {kHidden, kHidden}, 0.1f);
  tensor("blk.0.ffn_norm.weight", {kHidden}, 0.1f, 1.0f);
  tensor("blk.0.ffn_gate.weight", {kHidden, kFfn}, 0.1f);
  tensor("blk.0.ffn_up.weight", {kHidden, kFfn}, 0.1f);
  tensor("blk.0.ffn_down.weight", {kFfn, kHidden}, 0.1f);
  REQUIRE(w.write(path.string()).ok());
}

}  // namespace epd::model::test
