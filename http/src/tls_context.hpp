#pragma once
// The HTTP listener's TLS settings (OpenSSL through Asio): TLS 1.2 and 1.3 only, no renegotiation, HTTP/1.1
// only (no ALPN), the certificate chain and private key from PEM files.
#include <memory>

#include <boost/asio/ssl/context.hpp>

#include "epd/http/http_server.hpp"
#include "epd/protocol/result.hpp"

namespace epd::http {

// config_error naming the file and OpenSSL's reason when a file cannot be read or used, when the key is
// readable by every user, or when the key does not match the certificate.
protocol::Result<std::shared_ptr<boost::asio::ssl::context>> make_tls_context(const TlsFiles& files);

}  // namespace epd::http
