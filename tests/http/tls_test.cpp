// The front door over TLS: a CA and a server certificate made here with the openssl CLI, and curl as the
// client (it verifies the certificate against that CA, as any client would).
#include "test_server.hpp"
#include "test_tls.hpp"

using namespace epd::http;
using namespace epd::http::test;
using nlohmann::json;

namespace {

constexpr const char* kTlsKey = "sk-tls-test-0123456789abcdef";

struct TlsServer {
  TempDir dir;
  TestCerts certs = make_test_certs(dir.path);
  std::unique_ptr<TestServer> server;

  explicit TlsServer(bool keyed = true) {
    auto c = small_config();
    c.tls = TlsFiles{certs.cert, certs.key};
    if (keyed) {
      auto keys = ApiKeys::from_text(kTlsKey, "test");
      REQUIRE(keys.ok());
      c.api_keys = std::make_shared<const ApiKeys>(std::move(*keys));
    }
    server = std::make_unique<TestServer>(c);
  }

  std::string url(const std::string& path, const char* scheme = "https") const {
    return std::string(scheme) + "://127.0.0.1:" + std::to_string(server->port) + path;
  }
  // curl, bounded; prints the body then a line with the status.
  CommandResult curl(const std::string& args) const {
    return run_command("curl -sS --max-time 5 -w '\\n%{http_code}' " + args + " 2>&1");
  }
};

}  // namespace

TEST_CASE("tls: curl with the test CA gets the models with the key and 401 without", "[http][tls]") {
  TlsServer tls;
  auto ok = tls.curl("--cacert " + tls.certs.ca.string() + " -H 'Authorization: Bearer " + kTlsKey + "' " +
                     tls.url("/v1/models"));
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  CHECK(ok.output.ends_with("\n200"));
  auto j = json::parse(ok.output.substr(0, ok.output.rfind('\n')));
  CHECK(j["object"] == "list");

  auto refused = tls.curl("--cacert " + tls.certs.ca.string() + " " + tls.url("/v1/models"));
  INFO(refused.output);
  CHECK(refused.exit_code == 0);
  CHECK(refused.output.ends_with("\n401"));
  CHECK(refused.output.find("invalid_api_key") != std::string::npos);

  auto health = tls.curl("--cacert " + tls.certs.ca.string() + " " + tls.url("/health/live"));
  CHECK(health.output.ends_with("\n200"));
  CHECK(tls.server->api.tls_handshake_failures() == 0);
}

TEST_CASE("tls: a streamed chat completion and keep-alive requests work over TLS", "[http][tls]") {
  TlsServer tls;
  const std::string auth =
      "--cacert " + tls.certs.ca.string() + " -H 'Authorization: Bearer " + kTlsKey + "' ";
  auto stream = tls.curl(auth + "-N -H 'Content-Type: application/json' -d " +
                         R"('{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}' )" +
                         tls.url("/v1/chat/completions"));
  INFO(stream.output);
  REQUIRE(stream.exit_code == 0);
  CHECK(stream.output.find("data: [DONE]") != std::string::npos);
  CHECK(stream.output.ends_with("\n200"));
  // Two URLs on one curl: the second request reuses the TLS connection.
  auto two = tls.curl(auth + "-v " + tls.url("/v1/models") + " " + tls.url("/v1/stats"));
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  CHECK(two.output.find("Re-using existing connection") != std::string::npos);
  CHECK(two.output.find("\"requests\"") != std::string::npos);
}

TEST_CASE("tls: clients that cannot verify or do not speak TLS are turned away", "[http][tls]") {
  TlsServer tls;
  // curl's own CA bundle does not know the test CA: verification fails (curl exit 60).
  auto unverified = tls.curl(tls.url("/health/live"));
  INFO(unverified.output);
  CHECK(unverified.exit_code == 60);

  // Plain HTTP to the TLS port: the handshake fails and the connection is closed, no reply.
  auto plain = tls.curl(tls.url("/health/live", "http"));
  INFO(plain.output);
  CHECK(plain.exit_code != 0);
  CHECK(plain.output.find("200") == std::string::npos);

  // TLS 1.1 at most: refused (the listener speaks 1.2 and 1.3 only).
  auto old = tls.curl("--cacert " + tls.certs.ca.string() + " --tls-max 1.1 " + tls.url("/health/live"));
  INFO(old.output);
  CHECK(old.exit_code != 0);

  // TLS 1.2 exactly still works.
  auto v12 =
      tls.curl("--cacert " + tls.certs.ca.string() + " --tlsv1.2 --tls-max 1.2 " + tls.url("/health/live"));
  INFO(v12.output);
  CHECK(v12.output.ends_with("\n200"));

  for (int i = 0; i < 100 && tls.server->api.tls_handshake_failures() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(tls.server->api.tls_handshake_failures() >= 2);
  // The server is still fine.
  auto after = tls.curl("--cacert " + tls.certs.ca.string() + " " + tls.url("/health/live"));
  CHECK(after.output.ends_with("\n200"));
}

TEST_CASE("tls: a client that connects and never handshakes is dropped", "[http][tls]") {
  TlsServer tls;  // request_timeout is 500 ms in small_config()
  // nc-free: bash's /dev/tcp holds the connection open, silent, and reports when the server closes it.
  auto r = run_command("timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(tls.server->port) +
                       "; s=$(date +%s%N); cat <&3 >/dev/null; echo $(( ($(date +%s%N) - s) / 1000000 ))'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const long ms = std::stol(r.output);
  CHECK(ms >= 400);
  CHECK(ms < 3000);
  CHECK(tls.server->api.tls_handshake_failures() == 1);
}

TEST_CASE("tls: unusable certificate or key files stop the start with the file named", "[http][tls]") {
  TempDir dir;
  auto certs = make_test_certs(dir.path);
  auto start_with = [](TlsFiles files) {
    FakeRouterService service;
    auto c = small_config();
    c.tls = std::move(files);
    HttpApi api(service, c);
    auto r = api.start("127.0.0.1", 0);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == epd::protocol::ErrorCode::config_error);
    return r.error().detail;
  };
  auto missing = start_with({dir.path / "nope.pem", certs.key});
  CHECK(missing.find("tls_cert") != std::string::npos);
  CHECK(missing.find("nope.pem") != std::string::npos);

  auto garbage = dir.write("garbage.pem", "not a certificate\n");
  auto bad_cert = start_with({garbage, certs.key});
  CHECK(bad_cert.find("garbage.pem") != std::string::npos);
  CHECK(bad_cert.find("PEM") != std::string::npos);  // OpenSSL's reason follows

  auto bad_key = start_with({certs.cert, garbage});
  CHECK(bad_key.find("tls_key") != std::string::npos);
  CHECK(bad_key.find("garbage.pem") != std::string::npos);

  // The CA's key is a fine key, but not the certificate's.
  auto mismatch = start_with({certs.cert, dir.path / "ca.key"});
  INFO(mismatch);
  CHECK(mismatch.find("does not match") != std::string::npos);

  std::filesystem::permissions(certs.key, std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  auto world = start_with({certs.cert, certs.key});
  CHECK(world.find("every user") != std::string::npos);
}
