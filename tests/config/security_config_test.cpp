// [security]: CURVE key files named by the config, and the loopback-only rule of a config without keys.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "epd/config/cluster_config.hpp"
#include "epd/transport/curve_keys.hpp"

using namespace epd::config;
namespace fs = std::filesystem;

namespace {

std::string instance(const std::string& id, const std::string& role, const std::string& control,
                     const std::string& extra = "") {
  return "[[instance]]\nid = \"" + id + "\"\nrole = \"" + role + "\"\ncontrol = \"" + control + "\"\n" +
         extra + "\n";
}

const std::string kLoopback = instance("router", "router", "tcp://127.0.0.1:17100") +
                              instance("decode-0", "decode", "tcp://127.0.0.1:17103");

std::string refusal(const std::string& text) {
  auto cfg = parse_cluster_config(text, "/etc/epd/test.toml");
  REQUIRE_FALSE(cfg.ok());
  return cfg.error().detail;
}

struct KeyDir {
  fs::path dir = fs::temp_directory_path() /
                 ("epd-seccfg-" + std::to_string(::getpid()) + "-" +
                  std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  KeyDir() { REQUIRE(epd::transport::write_cluster_keys(dir / "keys", {"router", "decode-0"}, false)); }
  ~KeyDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  Result<ClusterConfig> load(const std::string& text) {
    std::ofstream(dir / "cluster.toml") << text;
    return load_cluster_config(dir / "cluster.toml");
  }
};

const std::string kSecurity = "[security]\ncurve_keys = \"keys/cluster.pub\"\n";

}  // namespace

TEST_CASE("loopback hosts are recognised", "[config]") {
  for (auto h : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"}) CHECK(is_loopback_host(h));
  for (auto h :
       {"0.0.0.0", "10.0.0.1", "127.0.0", "127.0.0.1.5", "127.0.0.1000", "*", "::", "eth0", "1127.0.0.1", ""})
    CHECK_FALSE(is_loopback_host(h));
}

TEST_CASE("without keys a non-loopback address is refused with the reason and the fix", "[config]") {
  REQUIRE(parse_cluster_config(kLoopback, "/etc/epd/test.toml").ok());
  REQUIRE(parse_cluster_config(instance("router", "router", "ipc:///tmp/epd-r") +
                                   instance("decode-0", "decode", "tcp://localhost:17103"),
                               "/etc/epd/test.toml")
              .ok());
  std::string detail;
  SECTION("a control endpoint") {
    detail = refusal(instance("router", "router", "tcp://0.0.0.0:17100") +
                     instance("decode-0", "decode", "tcp://127.0.0.1:17103"));
    CHECK(detail.find("control = \"tcp://0.0.0.0:17100\"") != std::string::npos);
  }
  SECTION("the router's http") {
    detail = refusal(instance("router", "router", "tcp://127.0.0.1:17100", "http = \"10.1.2.3:8080\"") +
                     instance("decode-0", "decode", "tcp://127.0.0.1:17103"));
    CHECK(detail.find("http") != std::string::npos);
  }
  SECTION("a metrics address") {
    detail = refusal(kLoopback +
                     instance("decode-1", "decode", "tcp://127.0.0.1:17104", "metrics = \"0.0.0.0:9100\""));
    CHECK(detail.find("metrics") != std::string::npos);
  }
  SECTION("the transfer engine's host") {
    detail = refusal("[transport]\nhost = \"192.168.1.5\"\n" + kLoopback);
    CHECK(detail.find("[transport] host") != std::string::npos);
  }
  CHECK(detail.find("is not a loopback address") != std::string::npos);
  CHECK(detail.find("epd-keygen") != std::string::npos);
  CHECK(detail.find("curve_keys") != std::string::npos);
}

TEST_CASE("with keys the cluster may listen anywhere and each instance reads its own key file", "[config]") {
  KeyDir k;
  auto cfg =
      k.load(kSecurity + instance("router", "router", "tcp://0.0.0.0:17100", "http = \"0.0.0.0:8080\"") +
             instance("decode-0", "decode", "tcp://10.0.0.2:17103"));
  REQUIRE(cfg.ok());
  CHECK(cfg->security.enabled());
  CHECK(cfg->find("decode-0")->curve_key == k.dir / "keys" / "decode-0.key");
  auto curve = curve_config_for(*cfg, *cfg->find("decode-0"));
  REQUIRE(curve.ok());
  CHECK(curve->public_key == cfg->security.public_key_of("decode-0"));
  CHECK(curve->allowed.size() == 2);
  CHECK(curve->allowed.at(cfg->security.public_key_of("router")) == "router");
  CHECK(curve->server_key("tcp://0.0.0.0:17100") == cfg->security.public_key_of("router"));
  CHECK(curve->server_key("tcp://10.9.9.9:1").empty());
}

TEST_CASE("key problems are config errors naming the file", "[config]") {
  KeyDir k;
  const std::string two = instance("router", "router", "tcp://127.0.0.1:17100") +
                          instance("decode-0", "decode", "tcp://127.0.0.1:17103");
  SECTION("a keys file that does not exist") {
    auto cfg = k.load("[security]\ncurve_keys = \"nope/cluster.pub\"\n" + two);
    REQUIRE_FALSE(cfg.ok());
    CHECK(cfg.error().detail.find("nope/cluster.pub") != std::string::npos);
  }
  SECTION("an instance the keys file does not list") {
    auto cfg = k.load(kSecurity + two + instance("prefill-0", "prefill", "tcp://127.0.0.1:17102"));
    REQUIRE_FALSE(cfg.ok());
    CHECK(cfg.error().detail.find("'prefill-0' has no public key") != std::string::npos);
  }
  SECTION("a secret key file others may read") {
    ::chmod((k.dir / "keys" / "router.key").c_str(), 0640);
    auto cfg = k.load(kSecurity + two);
    REQUIRE(cfg.ok());  // only the instance itself reads its secret
    auto curve = curve_config_for(*cfg, *cfg->find("router"));
    REQUIRE_FALSE(curve.ok());
    CHECK(curve.error().detail.find("router.key") != std::string::npos);
    CHECK(curve.error().detail.find("group or others") != std::string::npos);
  }
  SECTION("a key file that is not the one the cluster lists") {
    auto cfg =
        k.load(kSecurity +
               instance("router", "router", "tcp://127.0.0.1:17100", "curve_key = \"keys/decode-0.key\"") +
               instance("decode-0", "decode", "tcp://127.0.0.1:17103"));
    REQUIRE(cfg.ok());
    auto curve = curve_config_for(*cfg, *cfg->find("router"));
    REQUIRE_FALSE(curve.ok());
    CHECK(curve.error().detail.find("is not the one") != std::string::npos);
  }
  SECTION("a malformed keys file") {
    std::ofstream(k.dir / "keys" / "cluster.pub", std::ios::app) << "decode-1 not-a-key\n";
    auto cfg = k.load(kSecurity + two);
    REQUIRE_FALSE(cfg.ok());
    CHECK(cfg.error().detail.find("not a Z85 CURVE key") != std::string::npos);
  }
  SECTION("curve_key without [security]") {
    auto cfg =
        k.load(instance("router", "router", "tcp://127.0.0.1:17100", "curve_key = \"keys/router.key\"") +
               instance("decode-0", "decode", "tcp://127.0.0.1:17103"));
    REQUIRE_FALSE(cfg.ok());
    CHECK(cfg.error().detail.find("curve_key needs [security]") != std::string::npos);
  }
}

TEST_CASE("metrics scrape keys and TLS files are paths resolved against the config file", "[config]") {
  auto cfg = parse_cluster_config(kLoopback +
                                      "[security]\nmetrics_keys_file = \"scrape.keys\"\n"
                                      "metrics_tls_cert = \"/pki/m.pem\"\nmetrics_tls_key = \"m.key\"\n",
                                  "/etc/epd/test.toml");
  REQUIRE(cfg.ok());
  CHECK(cfg->security.metrics_keys_file == "/etc/epd/scrape.keys");
  CHECK(cfg->security.metrics_tls_cert == "/pki/m.pem");
  CHECK(cfg->security.metrics_tls_key == "/etc/epd/m.key");
  CHECK_FALSE(cfg->security.enabled());  // scrape keys alone do not open non-loopback control addresses

  CHECK(refusal(kLoopback + "[security]\nmetrics_tls_cert = \"m.pem\"\n").find("go together") !=
        std::string::npos);
  CHECK(refusal(kLoopback + "[security]\nmetrics_keys_file = \"\"\n").find("must not be empty") !=
        std::string::npos);
  CHECK(refusal(kLoopback + "[security]\nmetrics_key = \"x\"\n").find("metrics_key") != std::string::npos);
}
