#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "epd/launcher/line_splitter.hpp"

using epd::launcher::LineSplitter;

namespace {

struct Lines {
  std::vector<std::string> got;
  LineSplitter::Emit emit() {
    return [this](std::string_view l) { got.emplace_back(l); };
  }
};

}  // namespace

TEST_CASE("line splitter joins fragments into whole lines", "[launcher][unit]") {
  LineSplitter s;
  Lines out;
  s.feed("hel", out.emit());
  CHECK(out.got.empty());
  s.feed("lo\nwor", out.emit());
  s.feed("ld\r\n\nlast", out.emit());
  CHECK(out.got == std::vector<std::string>{"hello", "world", ""});
  CHECK(s.has_partial());
  s.finish(out.emit());
  CHECK(out.got.back() == "last");
  CHECK_FALSE(s.has_partial());
  s.finish(out.emit());  // nothing pending: nothing emitted
  CHECK(out.got.size() == 4);
}

TEST_CASE("line splitter cuts runaway lines at the limit", "[launcher][unit]") {
  LineSplitter s(4);
  Lines out;
  s.feed("ab", out.emit());
  s.feed("cdefghij\nxy\n", out.emit());
  CHECK(out.got == std::vector<std::string>{"abcd", "efgh", "ij", "xy"});
}
