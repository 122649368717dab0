#include "epd/http/utf8.hpp"

#include <cstdint>

namespace epd::http {
namespace {

// Well-formed sequences (Unicode Table 3-7): the lead byte fixes the length and the range of the second
// byte; every later byte is 80..BF. Overlongs (C0, C1, E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and
// code points above U+10FFFF (F4 90.., F5..FF) are ill formed.
struct Lead {
  int length = 0;  // 0: cannot start a sequence
  uint8_t second_lo = 0x80, second_hi = 0xBF;
};

Lead lead_of(uint8_t b) {
  if (b < 0x80) return {1};
  if (b >= 0xC2 && b <= 0xDF) return {2};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {};
}

}  // namespace

size_t append_utf8(std::string_view bytes, std::string& out, bool final) {
  size_t i = 0;
  while (i < bytes.size()) {
    auto b = static_cast<uint8_t>(bytes[i]);
    Lead lead = lead_of(b);
    if (lead.length == 0) {
      out += kReplacementChar;
      ++i;
      continue;
    }
    // How many bytes from i belong to the sequence: stop at the first that does not fit.
    int good = 1;
    while (good < lead.length && i + good < bytes.size()) {
      auto c = static_cast<uint8_t>(bytes[i + good]);
      bool fits = good == 1 ? c >= lead.second_lo && c <= lead.second_hi : c >= 0x80 && c <= 0xBF;
      if (!fits) break;
      ++good;
    }
    if (good == lead.length) {
      out.append(bytes.substr(i, good));
    } else if (i + good == bytes.size() && !final) {
      return i;  // fine so far; the next bytes decide
    } else {
      out += kReplacementChar;  // one for the maximal subpart; the misfit byte starts afresh
    }
    i += good;
  }
  return i;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  append_utf8(bytes, out, true);
  return out;
}

}  // namespace epd::http
