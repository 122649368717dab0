#include <catch2/catch.hpp>
#include <string>

#include "epd/config/cluster_config.hpp"

using namespace epd::config;
using epd::protocol::ErrorCode;

namespace {

// Settings are only built by the parser (the toml table type is private): read them from one instance.
Settings settings_of(const std::string& keys) {
  auto cfg = parse_cluster_config(
      "[[instance]]\nid = \"router\"\nrole = \"router\"\ncontrol = \"ipc:///tmp/r\"\n" + keys, "s.toml");
  REQUIRE(cfg.ok());
  return cfg->instances.at(0).settings;
}

template <class R>
std::string error_of(const R& r) {
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::config_error);
  return r.error().detail;
}

}  // namespace

TEST_CASE("settings: present keys are read, absent keys give the fallback", "[config][settings]") {
  const auto s = settings_of("n = 42\nx = 2.5\nwhole = 3\nflag = true\nname = \"abc\"\nwait_ms = 1500\n");
  CHECK(s.where().find("s.toml") != std::string::npos);
  CHECK(s.has("n"));
  CHECK_FALSE(s.has("absent"));
  CHECK(*s.get_uint("n", 7) == 42);
  CHECK(*s.get_uint("absent", 7) == 7);
  CHECK(*s.get_double("x", 0) == 2.5);
  CHECK(*s.get_double("whole", 0) == 3.0);  // an integer is a number too
  CHECK(*s.get_double("absent", 0.25) == 0.25);
  CHECK(*s.get_bool("flag", false) == true);
  CHECK(*s.get_bool("absent", true) == true);
  CHECK(*s.get_string("name", "") == "abc");
  CHECK(*s.get_string("absent", "dflt") == "dflt");
  CHECK(*s.get_ms("wait_ms", std::chrono::milliseconds(1)) == std::chrono::milliseconds(1500));
  CHECK(*s.get_ms("absent", std::chrono::milliseconds(9)) == std::chrono::milliseconds(9));
}

TEST_CASE("settings: bounds are inclusive and out-of-range values name the key", "[config][settings]") {
  const auto s = settings_of("n = 10\nneg = -3\nday_ms = 86400001\n");
  CHECK(*s.get_uint("n", 0, 10, 10) == 10);
  auto low = error_of(s.get_uint("n", 0, 11, 20));
  CHECK(low.find("key 'n'") != std::string::npos);
  CHECK(low.find("[11, 20], got 10") != std::string::npos);
  CHECK(error_of(s.get_uint("n", 0, 0, 9)).find("got 10") != std::string::npos);
  CHECK(error_of(s.get_uint("neg", 0)).find("got -3") != std::string::npos);
  CHECK(error_of(s.get_ms("day_ms", {})).find("key 'day_ms'") != std::string::npos);  // over 24 h
}

TEST_CASE("settings: wrong types are refused, naming the key and the type wanted", "[config][settings]") {
  const auto s = settings_of("str = \"5\"\nnum = 5\nflt = 1.5\nb = true\n");
  CHECK(error_of(s.get_uint("str", 0)).find("key 'str' must be an integer") != std::string::npos);
  CHECK(error_of(s.get_uint("flt", 0)).find("key 'flt' must be an integer") != std::string::npos);
  CHECK(error_of(s.get_double("b", 0)).find("key 'b' must be a number") != std::string::npos);
  CHECK(error_of(s.get_bool("num", false)).find("key 'num' must be true or false") != std::string::npos);
  CHECK(error_of(s.get_string("num", "")).find("key 'num' must be a string") != std::string::npos);
  CHECK(error_of(s.get_ms("str", {})).find("key 'str'") != std::string::npos);
  for (const auto& detail : {error_of(s.get_uint("str", 0)), error_of(s.get_bool("num", false))})
    CHECK(detail.find("s.toml") != std::string::npos);
}

TEST_CASE("settings: only_keys names the first unknown key", "[config][settings]") {
  const auto s = settings_of("kv_pages = 1\nkv_pagse = 2\n");
  CHECK(s.only_keys({"kv_pages", "kv_pagse"}).ok());
  const auto st = s.only_keys({"kv_pages"});
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == ErrorCode::config_error);
  CHECK(st.error().detail.find("key 'kv_pagse' is not known here") != std::string::npos);
  const Settings empty;
  CHECK(empty.only_keys({}).ok());
  CHECK_FALSE(empty.has("x"));
  CHECK(*empty.get_uint("x", 5) == 5);
}
