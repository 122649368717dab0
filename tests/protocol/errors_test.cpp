#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "epd/protocol/errors.hpp"
#include "sample_messages.hpp"

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

namespace {
// Collects the wire keys a struct lists.
struct KeyCollector {
  std::vector<std::string> keys;
  template <class T>
  void req(std::string_view k, T&) { keys.emplace_back(k); }
  template <class T>
  void opt(std::string_view k, T&) { keys.emplace_back(k); }
};
}  // namespace

TEST_CASE("docs/protocol.md documents every message and every key", "[protocol][docs]") {
  std::ifstream in(std::string(EPD_SOURCE_DIR) + "/docs/protocol.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  epd::protocol::testing::for_each_message_type([&](auto tag) {
    using T = decltype(tag);
    const std::string heading = "### " + std::string(type_name(T::kType)) + " (type " +
                                std::to_string(int(T::kType)) + ")";
    INFO(heading);
    const auto at = doc.find(heading);
    REQUIRE(at != std::string::npos);
    const auto end = doc.find("\n### ", at + 1);
    const std::string section = doc.substr(at, end == std::string::npos ? std::string::npos : end - at);
    KeyCollector keys;
    T msg{};
    T::fields(msg, keys);
    for (const auto& k : keys.keys) {
      INFO("key " << k);
      CHECK(section.find("| `" + k + "` |") != std::string::npos);
    }
  });
}
