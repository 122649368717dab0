#pragma once
// The API keys the front door accepts (`Authorization: Bearer <key>`), read from a file: one key per line,
// blank lines and lines starting with '#' ignored. Only each key's SHA-256 digest is kept, and a presented
// key is checked against every digest with CRYPTO_memcmp, so the time a check takes says neither which key
// nor how much of one matched (docs/http-api.md, "Authentication").
#include <array>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::http {

class ApiKeys {
 public:
  static constexpr size_t kMinKeyBytes = 16;
  static constexpr size_t kMaxKeyBytes = 256;

  // config_error naming the file (and the line, never the key) when it cannot be read, is readable or
  // writable by every user, holds no key, or holds a key shorter than kMinKeyBytes, longer than
  // kMaxKeyBytes or with characters other than visible ASCII.
  static protocol::Result<ApiKeys> load(const std::filesystem::path& file);
  // The same checks on keys already in memory; `source` names them in errors.
  static protocol::Result<ApiKeys> from_text(std::string_view text, const std::string& source);

  // Whether `presented` is one of the keys. Constant time in the keys' contents.
  bool accepts(std::string_view presented) const;
  size_t size() const { return digests_.size(); }

 private:
  using Digest = std::array<unsigned char, 32>;
  static Digest digest(std::string_view text);
  std::vector<Digest> digests_;
};

}  // namespace epd::http
