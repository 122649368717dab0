#pragma once
// Test helpers for the front door's TLS and API keys: a temporary directory, a CA and a server certificate
// for 127.0.0.1 made with the openssl CLI, and a way to run curl (or any command) and get its exit code and
// output.
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

namespace epd::http::test {

// A temporary directory removed (recursively) at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "epd-http-test-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Written with the given permissions (0600 by default: secrets must not be readable by others).
  std::filesystem::path write(const std::string& name, const std::string& text,
                              std::filesystem::perms perms = std::filesystem::perms::owner_read |
                                                             std::filesystem::perms::owner_write) {
    auto p = path / name;
    std::ofstream(p) << text;
    std::filesystem::permissions(p, perms);
    return p;
  }
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout (stderr too when the command redirects it)
};

// Runs `command` with sh; its stdout is returned.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A throwaway CA (ca.pem) and a certificate it signed for 127.0.0.1 and localhost (server.pem, its key
// server.key, mode 0600), in `dir`. EC P-256 keys: quick to make.
struct TestCerts {
  std::filesystem::path ca, cert, key;
};

inline TestCerts make_test_certs(const std::filesystem::path& dir) {
  const std::string d = dir.string();
  std::ofstream(dir / "ext.cnf") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                    "basicConstraints=CA:FALSE\n"
                                    "keyUsage=digitalSignature\n"
                                    "extendedKeyUsage=serverAuth\n";
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string cmd =
      "(cd '" + d + "' && umask 077 && openssl req -x509" + ec +
      " -keyout ca.key -out ca.pem -days 2 -subj /CN=epd-test-ca"
      " -addext keyUsage=critical,keyCertSign,cRLSign && openssl req" +
      ec + " -keyout server.key -out server.csr -subj /CN=127.0.0.1" +
      " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2"
      " -extfile ext.cnf -out server.pem)";
  auto r = run_command(cmd + " 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return {dir / "ca.pem", dir / "server.pem", dir / "server.key"};
}

}  // namespace epd::http::test
