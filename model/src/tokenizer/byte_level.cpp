#include "byte_level.hpp"

#include <unordered_map>

namespace epd::model::detail {
namespace {

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

struct Tables {
  std::array<std::string, 256> to_char;
  std::unordered_map<std::string, unsigned char> to_byte;
  Tables() {
    uint32_t extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = utf8_of(printable ? b : extra++);
      to_byte.emplace(to_char[b], static_cast<unsigned char>(b));
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_char(unsigned char b) {
  return tables().to_char[b];
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += tables().to_char[b];
  return out;
}

std::string from_byte_level(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t len = valid_utf8_at(s, i);
    if (len == 0) {
      out.push_back(s[i++]);
      continue;
    }
    auto it = tables().to_byte.find(std::string(s.substr(i, len)));
    if (it != tables().to_byte.end())
      out.push_back(static_cast<char>(it->second));
    else
      out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t valid_utf8_at(std::string_view t, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(t[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (no overlongs, surrogates)
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c == 0xE0)
    len = 3, lo = 0xA0;
  else if (c == 0xED)
    len = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF)
    len = 3;
  else if (c == 0xF0)
    len = 4, lo = 0x90;
  else if (c == 0xF4)
    len = 4, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3)
    len = 4;
  else
    return 0;
  if (i + len > t.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((at(i + k) & 0xC0) != 0x80) return 0;
  return len;
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t len = valid_utf8_at(text, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace epd::model::detail
