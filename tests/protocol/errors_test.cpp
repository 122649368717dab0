#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "epd/protocol/errors.hpp"

using namespace epd::protocol;

TEST_CASE("error table: unique codes and names, retryable flags", "[protocol][errors]") {
  std::set<int> codes;
  std::set<std::string_view> names;
  for (auto* e = error_table_begin(); e != error_table_end(); ++e) {
    CHECK(codes.insert(int(e->code)).second);
    CHECK(names.insert(e->name).second);
    CHECK_FALSE(e->meaning.empty());
  }
  CHECK(is_retryable(ErrorCode::peer_died));
  CHECK(is_retryable(ErrorCode::worker_crashed));
  CHECK_FALSE(is_retryable(ErrorCode::out_of_range));
  CHECK_FALSE(is_retryable(ErrorCode::bad_token));
  CHECK(make_error(ErrorCode::timeout, "x").retryable);
  CHECK(make_error(ErrorCode::timeout, "room 5").to_string() == "timeout (retryable): room 5");
  CHECK(error_name(static_cast<ErrorCode>(9999)) == "internal");
}

TEST_CASE("docs/protocol.md lists every error code with its retry column", "[protocol][errors][docs]") {
  std::ifstream in(std::string(EPD_SOURCE_DIR) + "/docs/protocol.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (auto* e = error_table_begin(); e != error_table_end(); ++e) {
    const std::string row = "| " + std::to_string(int(e->code)) + " | `" + std::string(e->name) + "` | " +
                            (e->retryable ? "yes" : "no") + " |";
    INFO(row);
    CHECK(doc.find(row) != std::string::npos);
  }
}
