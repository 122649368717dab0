// The tokenizer.ggml.* keys of a GGUF file (v2/v3). Only the header and the key/value section are read;
// every count and length is checked against the file's size and epd's bounds before anything is allocated.
#include <cstring>
#include <fstream>

#include "epd/model/tokenizer_load.hpp"

namespace epd::model {
namespace {

enum GgufType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12
};

struct Refused {
  std::string what;
};
[[noreturn]] void refuse(std::string what) {
  throw Refused{std::move(what)};
}

size_t scalar_size(uint32_t t) {
  switch (t) {
    case u8:
    case i8:
    case boolean:
      return 1;
    case u16:
    case i16:
      return 2;
    case u32:
    case i32:
    case f32:
      return 4;
    case u64:
    case i64:
    case f64:
      return 8;
    default:
      return 0;
  }
}

class Reader {
 public:
  explicit Reader(const std::string& path) : in_(path, std::ios::binary) {
    if (!in_) refuse("cannot open");
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
    in_.seekg(0);
  }
  template <class T>
  T pod() {
    T v;
    bytes(reinterpret_cast<char*>(&v), sizeof v);
    return v;
  }
  std::string str(uint64_t max_len) {
    const uint64_t n = pod<uint64_t>();
    if (n > max_len)
      refuse("a string of " + std::to_string(n) + " bytes (at most " + std::to_string(max_len) + ")");
    need(n);
    std::string s(n, '\0');
    bytes(s.data(), n);
    return s;
  }
  void skip(uint64_t n) {
    need(n);
    in_.seekg(static_cast<std::streamoff>(n), std::ios::cur);
    pos_ += n;
  }
  void need(uint64_t n) const {
    if (n > size_ - pos_)
      refuse("truncated (needs " + std::to_string(n) + " more bytes at offset " + std::to_string(pos_) + ")");
  }

 private:
  void bytes(char* out, uint64_t n) {
    need(n);
    in_.read(out, static_cast<std::streamsize>(n));
    if (!in_) refuse("read failed");
    pos_ += n;
  }
  std::ifstream in_;
  uint64_t size_ = 0, pos_ = 0;
};

void skip_value(Reader& r, uint32_t type, int depth = 0) {
  if (type == string) {
    r.skip(r.pod<uint64_t>());
  } else if (type == array) {
    if (depth > 0) refuse("nested arrays are not supported");
    const uint32_t et = r.pod<uint32_t>();
    const uint64_t n = r.pod<uint64_t>();
    if (const size_t es = scalar_size(et)) {
      if (n > UINT64_MAX / es) refuse("an array too large");
      r.skip(n * es);
    } else if (et == string) {
      for (uint64_t i = 0; i < n; ++i) r.skip(r.pod<uint64_t>());
    } else {
      refuse("an array of type " + std::to_string(et));
    }
  } else if (const size_t s = scalar_size(type)) {
    r.skip(s);
  } else {
    refuse("a value of unknown type " + std::to_string(type));
  }
}

uint64_t read_uint(Reader& r, uint32_t type, const std::string& key) {
  switch (type) {
    case u8:
      return r.pod<uint8_t>();
    case u16:
      return r.pod<uint16_t>();
    case u32:
      return r.pod<uint32_t>();
    case u64:
      return r.pod<uint64_t>();
    case i32: {
      const int32_t v = r.pod<int32_t>();
      if (v < 0) refuse(key + " is negative");
      return static_cast<uint64_t>(v);
    }
    case i64: {
      const int64_t v = r.pod<int64_t>();
      if (v < 0) refuse(key + " is negative");
      return static_cast<uint64_t>(v);
    }
    default:
      refuse(key + " is not an integer");
  }
}

uint64_t array_header(Reader& r, uint32_t type, uint32_t want, uint64_t max, const std::string& key) {
  if (type != array) refuse(key + " is not an array");
  const uint32_t et = r.pod<uint32_t>();
  if (et != want)
    refuse(key + " has elements of type " + std::to_string(et) + ", not " + std::to_string(want));
  const uint64_t n = r.pod<uint64_t>();
  if (n > max) refuse(key + " has " + std::to_string(n) + " entries (at most " + std::to_string(max) + ")");
  if (const size_t es = scalar_size(want))
    r.need(n * es);
  else
    r.need(n * 8);  // every string has at least its length
  return n;
}

VocabMetadata read(const std::string& path) {
  Reader r(path);
  char magic[4];
  for (char& c : magic) c = r.pod<char>();
  if (std::memcmp(magic, "GGUF", 4) != 0) refuse("not a GGUF file (bad magic)");
  const uint32_t version = r.pod<uint32_t>();
  if (version != 2 && version != 3) refuse("GGUF version " + std::to_string(version) + " (2 or 3 supported)");
  r.pod<uint64_t>();  // tensor count: not needed here
  const uint64_t kv_count = r.pod<uint64_t>();
  if (kv_count > 1u << 20) refuse(std::to_string(kv_count) + " metadata entries");
  VocabMetadata v;
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string key = r.str(64 * 1024);
    const uint32_t type = r.pod<uint32_t>();
    if (key == "tokenizer.ggml.model" || key == "tokenizer.ggml.pre" || key == "tokenizer.chat_template") {
      if (type != string) refuse(key + " is not a string");
      std::string s = r.str(key == "tokenizer.chat_template" ? kMaxChatTemplateBytes : 256);
      if (key == "tokenizer.ggml.model")
        v.model = std::move(s);
      else if (key == "tokenizer.ggml.pre")
        v.pre = std::move(s);
      else
        v.chat_template = std::move(s);
    } else if (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.merges") {
      const bool tokens = key == "tokenizer.ggml.tokens";
      const uint64_t n = array_header(r, type, string, tokens ? kMaxVocabSize : kMaxMerges, key);
      auto& out = tokens ? v.tokens : v.merges;
      out.reserve(n);
      for (uint64_t k = 0; k < n; ++k) out.push_back(r.str(tokens ? kMaxTokenBytes : 2 * kMaxTokenBytes + 1));
    } else if (key == "tokenizer.ggml.scores") {
      const uint64_t n = array_header(r, type, f32, kMaxVocabSize, key);
      v.scores.resize(n);
      for (auto& s : v.scores) s = r.pod<float>();
    } else if (key == "tokenizer.ggml.token_type") {
      const uint64_t n = array_header(r, type, i32, kMaxVocabSize, key);
      v.token_types.resize(n);
      for (auto& t : v.token_types) t = r.pod<int32_t>();
    } else if (key == "tokenizer.ggml.bos_token_id" || key == "tokenizer.ggml.eos_token_id" ||
               key == "tokenizer.ggml.unknown_token_id") {
      const uint64_t id = read_uint(r, type, key);
      if (id >= kMaxVocabSize) refuse(key + " is out of range");
      auto& slot = key == "tokenizer.ggml.bos_token_id"   ? v.bos
                   : key == "tokenizer.ggml.eos_token_id" ? v.eos
                                                          : v.unk;
      slot = static_cast<uint32_t>(id);
    } else if (key == "tokenizer.ggml.add_bos_token" || key == "tokenizer.ggml.add_space_prefix") {
      if (type != boolean) refuse(key + " is not a bool");
      const bool b = r.pod<uint8_t>() != 0;
      (key == "tokenizer.ggml.add_bos_token" ? v.add_bos : v.add_space_prefix) = b;
    } else {
      skip_value(r, type);
    }
  }
  if (v.model.empty()) refuse("no tokenizer.ggml.model (the file carries no vocabulary)");
  return v;
}

}  // namespace

protocol::Result<VocabMetadata> read_gguf_vocab(const std::string& path) {
  try {
    return read(path);
  } catch (const Refused& e) {
    return protocol::make_error(protocol::ErrorCode::config_error, "gguf " + path + ": " + e.what);
  } catch (const std::bad_alloc&) {
    return protocol::make_error(protocol::ErrorCode::config_error, "gguf " + path + ": out of memory");
  }
}

}  // namespace epd::model
