// append_utf8 / to_valid_utf8: the replacement rule, and that decoding in pieces equals decoding at once.
#include <catch2/catch.hpp>
#include <random>

#include "epd/http/utf8.hpp"

using namespace epd::http;

namespace {

const std::string R(kReplacementChar);

// Decodes `bytes` cut at the given positions, carrying what each call leaves unused into the next.
std::string decode_in_pieces(std::string_view bytes, const std::vector<size_t>& cuts) {
  std::string out, carry;
  size_t from = 0;
  for (size_t cut : cuts) {
    carry.append(bytes.substr(from, cut - from));
    carry.erase(0, append_utf8(carry, out, false));
    CHECK(carry.size() <= 3);
    from = cut;
  }
  carry.append(bytes.substr(from));
  CHECK(append_utf8(carry, out, true) == carry.size());
  return out;
}

}  // namespace

TEST_CASE("utf8: valid text passes through unchanged", "[http][utf8]") {
  for (std::string s : std::vector<std::string>{"", "plain ascii", "h\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87",
                                                "\xF0\x9F\x98\x80 emoji", std::string("nul\0inside", 10),
                                                "\xEF\xBF\xBD", "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF"}) {
    INFO(s);
    CHECK(to_valid_utf8(s) == s);
  }
}

TEST_CASE("utf8: maximal subparts become one U+FFFD each (Unicode's own example)", "[http][utf8]") {
  // The Unicode Standard, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
  CHECK(to_valid_utf8("a\xF1\x80\x80\xE1\x80\xC2"
                      "b\x80"
                      "c\x80\xBF"
                      "d") == "a" + R + R + R + "b" + R + "c" + R + R + "d");
}

TEST_CASE("utf8: ill-formed bytes and sequences", "[http][utf8]") {
  CHECK(to_valid_utf8("\xFF") == R);
  CHECK(to_valid_utf8("\xC0\xAF") == R + R);  // overlong lead: every byte on its own
  CHECK(to_valid_utf8("\xE0\x80\x80") == R + R + R);
  CHECK(to_valid_utf8("\xED\xA0\x80") == R + R + R);          // surrogate U+D800
  CHECK(to_valid_utf8("\xF4\x90\x80\x80") == R + R + R + R);  // above U+10FFFF
  CHECK(to_valid_utf8("\xF5\x80") == R + R);
  CHECK(to_valid_utf8("\xC3") == R);                           // truncated at the end
  CHECK(to_valid_utf8("\xF0\x9F\x98") == R);                   // 3 of 4 bytes: one subpart
  CHECK(to_valid_utf8("\xF0\x9F\x98x") == R + "x");            // the misfit starts afresh
  CHECK(to_valid_utf8("\xE2\x82\xC3\xA9") == R + "\xC3\xA9");  // ...even when it is a lead
  CHECK(to_valid_utf8("\xC3\xA9\xA9") == "\xC3\xA9" + R);      // stray continuation
}

TEST_CASE("utf8: an unfinished sequence at the end waits unless final", "[http][utf8]") {
  std::string out;
  CHECK(append_utf8("ab\xF0\x9F", out, false) == 2);
  CHECK(out == "ab");
  CHECK(append_utf8("ab\xF0\x9F", out, true) == 4);
  CHECK(out == "abab" + R);
  out.clear();
  CHECK(append_utf8("a\xF0\x28", out, false) == 3);  // already ill formed: nothing to wait for
  CHECK(out == "a" + R + "(");
}

TEST_CASE("utf8: decoding at every cut equals decoding at once", "[http][utf8]") {
  const std::string text = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\xF0\x9F\x98z\xFF\xE0\x80\xC3";
  const std::string whole = to_valid_utf8(text);
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      INFO("cuts " << a << " " << b);
      CHECK(decode_in_pieces(text, {a, b}) == whole);
    }
  }
}

TEST_CASE("utf8: random bytes in random pieces decode as at once, to valid UTF-8", "[http][utf8]") {
  std::mt19937 rng(7);
  // Bytes near the interesting boundaries, so ill-formed and well-formed sequences both occur often.
  const uint8_t pool[] = {'a',  0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1,
                          0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF};
  for (int round = 0; round < 2000; ++round) {
    std::string bytes;
    size_t n = rng() % 24;
    for (size_t i = 0; i < n; ++i) bytes += static_cast<char>(pool[rng() % sizeof(pool)]);
    std::vector<size_t> cuts;
    for (size_t i = 1; i < n; ++i)
      if (rng() % 3 == 0) cuts.push_back(i);
    auto whole = to_valid_utf8(bytes);
    INFO("round " << round);
    CHECK(decode_in_pieces(bytes, cuts) == whole);
    CHECK(to_valid_utf8(whole) == whole);  // valid: a second pass changes nothing
  }
}
