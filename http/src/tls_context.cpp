#include "tls_context.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

namespace epd::http {
namespace {

using protocol::ErrorCode;
using protocol::make_error;

// OpenSSL's reasons for the last failure (its error queue, emptied).
std::string openssl_reason() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown error" : out;
}

}  // namespace

protocol::Result<std::shared_ptr<boost::asio::ssl::context>> make_tls_context(const TlsFiles& files) {
  namespace ssl = boost::asio::ssl;
  auto fail = [](const std::string& key, const std::filesystem::path& file, const std::string& why) {
    return make_error(ErrorCode::config_error, key + " " + file.string() + ": " + why);
  };
  struct stat st {};
  if (::stat(files.cert.c_str(), &st) != 0)
    return fail("tls_cert", files.cert, "cannot be read (does it exist?)");
  if (::stat(files.key.c_str(), &st) != 0)
    return fail("tls_key", files.key, "cannot be read (does it exist?)");
  if (st.st_mode & (S_IROTH | S_IWOTH))
    return fail("tls_key", files.key, "the private key is readable or writable by every user; chmod o-rw it");

  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  ERR_clear_error();
  // Older protocols have known weaknesses; every client of an OpenAI API speaks TLS 1.2 at least.
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(native,
                      SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
  if (SSL_CTX_use_certificate_chain_file(native, files.cert.c_str()) != 1)
    return fail("tls_cert", files.cert, "not a usable PEM certificate chain: " + openssl_reason());
  if (SSL_CTX_use_PrivateKey_file(native, files.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    // OpenSSL checks the key against the certificate as it loads it: say which file it had to match.
    const bool mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
    return fail("tls_key", files.key,
                (mismatch ? "does not match the certificate in " + files.cert.string()
                          : std::string("not a usable PEM private key")) +
                    ": " + openssl_reason());
  }
  if (SSL_CTX_check_private_key(native) != 1)
    return fail("tls_key", files.key,
                "does not match the certificate in " + files.cert.string() + ": " + openssl_reason());
  return ctx;
}

}  // namespace epd::http
