#include "epd/http/base64.hpp"

#include <array>

namespace epd::http {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr int8_t kInvalid = -1;
constexpr int8_t kSpace = -2;
constexpr int8_t kPad = -3;

constexpr std::array<int8_t, 256> make_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = kInvalid;
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  for (char c : {' ', '\t', '\r', '\n'}) t[static_cast<uint8_t>(c)] = kSpace;
  t['='] = kPad;
  return t;
}
constexpr auto kTable = make_table();

std::string describe(char c) {
  auto u = static_cast<uint8_t>(c);
  if (u >= 0x21 && u <= 0x7e) return std::string("'") + c + "'";
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[u >> 4] + kHex[u & 15];
}

protocol::Error invalid(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, "invalid base64: " + std::move(detail));
}

}  // namespace

std::string base64_encode(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{bytes[i]} << 16;
    if (rest == 2) v |= uint32_t{bytes[i + 1]} << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

protocol::Result<std::vector<uint8_t>> base64_decode(std::string_view text, size_t max_bytes) {
  // Pass 1: validate and count, so a bad or oversized input costs no allocation.
  size_t symbols = 0, pads = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    int8_t v = kTable[static_cast<uint8_t>(text[i])];
    if (v == kSpace) continue;
    if (v == kInvalid) return invalid(describe(text[i]) + " at offset " + std::to_string(i));
    if (v == kPad) {
      ++pads;
    } else if (pads > 0) {
      return invalid("data after '=' padding at offset " + std::to_string(i));
    } else {
      ++symbols;
    }
  }
  size_t total = symbols + pads;
  if (total % 4 != 0) {
    return invalid(std::to_string(total) + " characters (whitespace excluded); a multiple of 4 is needed");
  }
  if (pads > 2) return invalid("more than two '=' padding characters");
  size_t size = total / 4 * 3 - pads;
  if (size > max_bytes) {
    return protocol::make_error(protocol::ErrorCode::oversized, "decoded size " + std::to_string(size) +
                                                                    " bytes exceeds the limit of " +
                                                                    std::to_string(max_bytes) + " bytes");
  }

  // Pass 2: decode; the input is known to be well formed.
  std::vector<uint8_t> out;
  out.reserve(size);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    int8_t v = kTable[static_cast<uint8_t>(c)];
    if (v < 0) continue;  // whitespace or padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
      acc &= (1u << bits) - 1;
    }
  }
  return out;
}

}  // namespace epd::http
