// epd-bench serve's SSE parser: the same events whatever the pieces the bytes arrive in.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "sse.hpp"

using epd::bench::SseParser;

namespace {

std::vector<std::string> parse_in_pieces(const std::string& bytes, size_t piece) {
  SseParser p;
  std::vector<std::string> out;
  for (size_t i = 0; i < bytes.size(); i += piece)
    p.feed(std::string_view(bytes).substr(i, piece), [&](std::string_view d) { out.emplace_back(d); });
  return out;
}

}  // namespace

TEST_CASE("SseParser: events split at any byte give the same data", "[bench][sse]") {
  const std::string stream =
      "data: {\"a\":1}\n\n"
      ": keep-alive comment\n\n"
      "event: message\ndata: line one\ndata: line two\n\n"
      "data:no-space\r\n\r\n"
      "id: 7\n\n"  // no data: no event
      "data: [DONE]\n\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "line one\nline two", "no-space", "[DONE]"};
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    INFO("piece " << piece);
    CHECK(parse_in_pieces(stream, piece) == expected);
  }
}

TEST_CASE("SseParser: an event cut before its blank line is pending, not delivered", "[bench][sse]") {
  SseParser p;
  std::vector<std::string> out;
  p.feed("data: {\"x\"", [&](std::string_view d) { out.emplace_back(d); });
  CHECK(out.empty());
  CHECK(p.pending());
  p.feed(":1}\n", [&](std::string_view d) { out.emplace_back(d); });
  CHECK(out.empty());
  p.feed("\n", [&](std::string_view d) { out.emplace_back(d); });
  CHECK(out == std::vector<std::string>{"{\"x\":1}"});
  CHECK_FALSE(p.pending());
}
