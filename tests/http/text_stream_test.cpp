// TextStream: deltas never split a character nor show a stop string, and joined they equal the text sent at
// once, for every way of cutting the bytes into pushes.
#include <catch2/catch.hpp>
#include <random>

#include "epd/http/text_stream.hpp"
#include "epd/http/utf8.hpp"

using namespace epd::http;

namespace {

const std::string kReplacement(kReplacementChar);
using Stops = std::vector<std::string>;

// The non-streamed answer from first principles: decode everything, then cut before the stop occurrence
// that ends first (the longest one when several end at the same byte).
TextStream::Delta reference(std::string_view bytes, const Stops& stops) {
  std::string text = to_valid_utf8(bytes);
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best = std::string::npos;
    for (const auto& raw : stops) {
      std::string s = to_valid_utf8(raw);
      if (s.empty() || s.size() > end) continue;
      if (text.compare(end - s.size(), s.size(), s) == 0) best = std::min(best, end - s.size());
    }
    if (best != std::string::npos) return {text.substr(0, best), true};
  }
  return {text, false};
}

struct Run {
  std::vector<std::string> deltas;  // one per push, then finish's
  std::string joined;
  bool stopped = false;
};

// Pushes `bytes` cut at `cuts` (ascending) and checks what must hold for every delta.
Run stream(std::string_view bytes, const Stops& stops, const std::vector<size_t>& cuts) {
  TextStream ts(stops);
  Run run;
  auto take = [&](const TextStream::Delta& d) {
    CHECK(to_valid_utf8(d.text) == d.text);         // each delta is valid UTF-8 by itself
    CHECK_FALSE((run.stopped && !d.text.empty()));  // nothing after the stop
    run.deltas.push_back(d.text);
    run.joined += d.text;
    run.stopped = run.stopped || d.stopped;
    CHECK(ts.stopped() == run.stopped);
  };
  size_t from = 0;
  for (size_t cut : cuts) {
    take(ts.push(bytes.substr(from, cut - from)));
    from = cut;
  }
  take(ts.push(bytes.substr(from)));
  take(ts.finish());
  return run;
}

void check_every_two_cuts(std::string_view bytes, const Stops& stops) {
  auto want = reference(bytes, stops);
  for (size_t a = 0; a <= bytes.size(); ++a) {
    for (size_t b = a; b <= bytes.size(); ++b) {
      INFO("cuts " << a << " " << b);
      auto run = stream(bytes, stops, {a, b});
      CHECK(run.joined == want.text);
      CHECK(run.stopped == want.stopped);
    }
  }
  auto at_once = complete_text(bytes, stops);
  CHECK(at_once.text == want.text);
  CHECK(at_once.stopped == want.stopped);
}

std::vector<size_t> every_byte(size_t n) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < n; ++i) cuts.push_back(i);
  return cuts;
}

}  // namespace

TEST_CASE("text stream: ASCII without stops passes through at once", "[http][text_stream]") {
  TextStream ts;
  auto d = ts.push("Hello");
  CHECK(d.text == "Hello");
  CHECK_FALSE(d.stopped);
  CHECK(ts.push("").text.empty());
  CHECK(ts.push(", world").text == ", world");
  CHECK(ts.finish().text.empty());
  CHECK(ts.push("late").text.empty());  // after finish nothing more comes out
}

TEST_CASE("text stream: a character split at every byte boundary comes out whole", "[http][text_stream]") {
  for (std::string ch : {"\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80"}) {
    INFO("character of " << ch.size() << " bytes");
    std::string bytes = "a" + ch + "b" + ch;
    check_every_two_cuts(bytes, {});
    auto run = stream(bytes, {}, every_byte(bytes.size()));
    CHECK(run.joined == bytes);
    for (const auto& d : run.deltas) CHECK((d.empty() || d == "a" || d == "b" || d == ch));
  }
}

TEST_CASE("text stream: a 4-byte emoji pushed byte by byte", "[http][text_stream]") {
  TextStream ts;
  CHECK(ts.push("\xF0").text.empty());
  CHECK(ts.push("\x9F").text.empty());
  CHECK(ts.push("\x98").text.empty());
  CHECK(ts.push("\x80").text == "\xF0\x9F\x98\x80");
  CHECK(ts.finish().text.empty());
}

TEST_CASE("text stream: invalid bytes become U+FFFD as soon as they are known to be invalid",
          "[http][text_stream]") {
  TextStream ts;
  CHECK(ts.push("\xFF").text == kReplacement);
  CHECK(ts.push("a\xE2\x82").text == "a");         // may still become a character
  CHECK(ts.push("x").text == kReplacement + "x");  // it did not
  CHECK(ts.push("\xF0\x9F").text.empty());
  CHECK(ts.finish().text == kReplacement);  // cut short at the end
  check_every_two_cuts("\xFFz\xE2\x82x\xC3\xA9\xA9\xF0\x9F", {});
}

TEST_CASE("text stream: a stop string spanning pushes is never sent", "[http][text_stream]") {
  TextStream ts({"END"});
  CHECK(ts.push("abcE").text == "abc");
  CHECK(ts.push("N").text.empty());
  auto d = ts.push("D and more");
  CHECK(d.text.empty());
  CHECK(d.stopped);
  CHECK(ts.push("even more").text.empty());
  CHECK(ts.push("even more").stopped);
  auto f = ts.finish();
  CHECK(f.text.empty());
  CHECK(f.stopped);
  check_every_two_cuts("abcEND and more", {"END"});
}

TEST_CASE("text stream: a held-back start that does not become a stop is released", "[http][text_stream]") {
  TextStream ts({"END"});
  CHECK(ts.push("abEN").text == "ab");
  CHECK(ts.push("x").text == "ENx");
  CHECK(ts.push("E").text.empty());
  auto f = ts.finish();
  CHECK(f.text == "E");
  CHECK_FALSE(f.stopped);
  // A repeated prefix: only the part that can still begin "aab" is held.
  TextStream rep({"aab"});
  CHECK(rep.push("aa").text.empty());
  CHECK(rep.push("a").text == "a");
  auto d = rep.push("b");
  CHECK(d.text.empty());
  CHECK(d.stopped);
  check_every_two_cuts("xaaab", {"aab"});
  check_every_two_cuts("EENEENDx", {"END"});
}

TEST_CASE("text stream: overlapping stops cut at the one that completes first", "[http][text_stream]") {
  CHECK(complete_text("abc", {"abc", "b"}).text == "a");  // "b" completes before "abc"
  CHECK(complete_text("abcd", {"abcd", "bc"}).text == "a");
  CHECK(complete_text("xabc", {"bc", "abc"}).text == "x");  // same end: the longer wins
  CHECK(complete_text("xabc", {"abc", "bc"}).text == "x");  // whatever the order
  CHECK(complete_text("abab", {"bab", "aba"}).text.empty());
  for (const Stops& stops : {Stops{"abc", "b"}, Stops{"abcd", "bc"}, Stops{"bc", "abc"}, Stops{"bab", "aba"},
                             Stops{"aa", "a"}, Stops{"ab", "ab"}}) {
    check_every_two_cuts("xabcdabab", stops);
  }
}

TEST_CASE("text stream: a stop at the very start leaves no text", "[http][text_stream]") {
  TextStream ts({"Hi"});
  auto d = ts.push("Hi there");
  CHECK(d.text.empty());
  CHECK(d.stopped);
  check_every_two_cuts("Hi there", {"Hi"});
  check_every_two_cuts("\n\nrest", {"\n"});
}

TEST_CASE("text stream: stops and UTF-8 together", "[http][text_stream]") {
  TextStream ts({"\xC3\xA9"});  // "é"
  CHECK(ts.push("caf\xC3").text == "caf");
  auto d = ts.push("\xA9!");
  CHECK(d.text.empty());
  CHECK(d.stopped);

  check_every_two_cuts("a\xF0\x9F\x98\x80 b \xF0\x9F\x98\x81", {"\xF0\x9F\x98\x81"});
  check_every_two_cuts("\xE4\xB8\xAD\xE6\x96\x87 END", {"\xE6\x96\x87 E"});
  // A stop can only match whole characters: a lone continuation byte is U+FFFD, not a piece of "é".
  CHECK(complete_text("caf\xC3\xA9", {"\xA9"}).text == "caf\xC3\xA9");
  CHECK_FALSE(complete_text("caf\xC3\xA9", {"\xA9"}).stopped);
  // ...and matches U+FFFD, as a stop given as U+FFFD does.
  CHECK(complete_text("a\xFF"
                      "b",
                      {"\xA9"})
            .text == "a");
  check_every_two_cuts(
      "a\xFF"
      "b",
      {kReplacement});
  // The replacement made at finish can complete a stop too.
  TextStream end({kReplacement});
  CHECK(end.push("a\xF0\x9F").text == "a");
  auto f = end.finish();
  CHECK(f.text.empty());
  CHECK(f.stopped);
}

TEST_CASE("text stream: empty stops are ignored", "[http][text_stream]") {
  auto d = complete_text("abc", {"", "z"});
  CHECK(d.text == "abc");
  CHECK_FALSE(d.stopped);
}

TEST_CASE("text stream: random bytes, stops and pushes join to the text sent at once",
          "[http][text_stream]") {
  std::mt19937 rng(11);
  // A small alphabet so stops occur often, with multi-byte characters and invalid bytes mixed in.
  const std::vector<std::string> pieces = {
      "a",    "b",    "a",        "b",    "\xC3\xA9", "\xF0\x9F\x98\x80", "\xE4\xB8\xAD",
      "\xFF", "\xC3", "\xF0\x9F", "\x80", "\n"};
  for (int round = 0; round < 3000; ++round) {
    std::string bytes;
    for (size_t i = 0, n = rng() % 16; i < n; ++i) bytes += pieces[rng() % pieces.size()];
    Stops stops;
    for (size_t i = 0, n = rng() % 5; i < n; ++i) {
      std::string s;
      for (size_t j = 0, m = 1 + rng() % 3; j < m; ++j) s += pieces[rng() % pieces.size()];
      stops.push_back(s);
    }
    std::vector<size_t> cuts;
    for (size_t i = 1; i < bytes.size(); ++i)
      if (rng() % 3 == 0) cuts.push_back(i);
    INFO("round " << round);
    auto want = reference(bytes, stops);
    auto run = stream(bytes, stops, cuts);
    CHECK(run.joined == want.text);
    CHECK(run.stopped == want.stopped);
    auto at_once = complete_text(bytes, stops);
    CHECK(at_once.text == want.text);
  }
}
