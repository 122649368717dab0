#include "epd/http/api_keys.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace epd::http {

using protocol::ErrorCode;
using protocol::make_error;

ApiKeys::Digest ApiKeys::digest(std::string_view text) {
  Digest d{};
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), d.data(), &n, EVP_sha256(), nullptr);
  return d;
}

protocol::Result<ApiKeys> ApiKeys::from_text(std::string_view text, const std::string& source) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::config_error, "api_keys_file " + source + ": " + why);
  };
  ApiKeys keys;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = "line " + std::to_string(line_no);
    // The key itself never goes into a message: logs are read by more people than the keys file.
    if (line.size() < kMinKeyBytes)
      return bad(where + ": the key is " + std::to_string(line.size()) + " characters; at least " +
                 std::to_string(kMinKeyBytes) + " are needed (e.g. `openssl rand -hex 32`)");
    if (line.size() > kMaxKeyBytes)
      return bad(where + ": the key is longer than " + std::to_string(kMaxKeyBytes) + " characters");
    for (char c : line)
      if (c < 0x21 || c > 0x7e) return bad(where + ": a key may only hold visible ASCII characters");
    keys.digests_.push_back(digest(line));
  }
  if (keys.digests_.empty()) return bad("holds no key (one per line; '#' starts a comment)");
  return keys;
}

protocol::Result<ApiKeys> ApiKeys::load(const std::filesystem::path& file) {
  const std::string name = file.string();
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0)
    return make_error(ErrorCode::config_error, "api_keys_file " + name + ": cannot be read (does it exist?)");
  if (!S_ISREG(st.st_mode))
    return make_error(ErrorCode::config_error, "api_keys_file " + name + ": is not a regular file");
  // Keys in a file every local user can read are no secret; refuse to start rather than serve with them.
  if (st.st_mode & (S_IROTH | S_IWOTH))
    return make_error(ErrorCode::config_error,
                      "api_keys_file " + name + ": is readable or writable by every user; chmod o-rw it");
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  if (!in || !(text << in.rdbuf()))
    return make_error(ErrorCode::config_error, "api_keys_file " + name + ": cannot be read (or is empty)");
  std::string s = text.str();
  auto keys = from_text(s, name);
  OPENSSL_cleanse(s.data(), s.size());
  return keys;
}

bool ApiKeys::accepts(std::string_view presented) const {
  // Every digest is compared in full, whichever matches: the time depends on the number of keys only.
  const Digest d = digest(presented);
  int matches = 0;
  for (const auto& k : digests_)
    matches |= static_cast<int>(CRYPTO_memcmp(d.data(), k.data(), d.size()) == 0);
  return matches != 0;
}

}  // namespace epd::http
