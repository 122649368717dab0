#include "epd/actors/build_identity.hpp"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "epd/protocol/compat.hpp"

#ifndef EPD_BUILD_ID
#define EPD_BUILD_ID "unknown"
#endif

namespace epd::actors {
namespace fs = std::filesystem;
using protocol::ErrorCode;
using protocol::make_error;

namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    ok_ = ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1;
  }
  void update(const void* data, size_t n) { ok_ = ok_ && EVP_DigestUpdate(ctx_.get(), data, n) == 1; }
  void update(std::string_view s) { update(s.data(), s.size()); }
  protocol::Result<std::string> hex() {
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!ok_ || EVP_DigestFinal_ex(ctx_.get(), md, &len) != 1)
      return make_error(ErrorCode::internal, "SHA-256 failed (OpenSSL)");
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) (out += kHex[md[i] >> 4]) += kHex[md[i] & 15];
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
  bool ok_ = false;
};

protocol::Status hash_file(Sha256& sha, const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(ErrorCode::config_error, "cannot read " + file.string() + " to fingerprint it");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    sha.update(buf.data(), size_t(in.gcount()));
  }
  if (in.bad()) return make_error(ErrorCode::config_error, "reading " + file.string() + " failed");
  return {};
}

protocol::Result<std::pair<uint32_t, uint32_t>> test_revisions(std::string_view text) {
  const auto bad = [&] {
    return make_error(ErrorCode::config_error, "EPD_TEST_PROTOCOL_REVISIONS=\"" + std::string(text) +
                                                   "\": want N or N..M (N <= M, N > 0)");
  };
  const auto number = [](std::string_view s) -> std::optional<uint32_t> {
    if (s.empty() || s.size() > 9 ||
        !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    return uint32_t(std::stoul(std::string(s)));
  };
  const auto dots = text.find("..");
  auto lo = number(text.substr(0, dots));
  auto hi = dots == std::string_view::npos ? lo : number(text.substr(dots + 2));
  if (!lo || !hi || *lo == 0 || *lo > *hi) return bad();
  return std::pair{*lo, *hi};
}

}  // namespace

std::string_view build_id() {
  return EPD_BUILD_ID;
}

protocol::Result<std::string> model_digest(const model::ModelConfig& model) {
  Sha256 sha;
  if (model.checkpoint.empty()) {
    // Seeded weights are a function of the shape and the seed; threads change no result.
    model::ModelConfig shape = model;
    shape.threads = 1;
    sha.update("epd seeded model v1\n");
    sha.update(model::to_toml(shape));
    return sha.hex();
  }
  const fs::path root(model.checkpoint);
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(root, ec)) {
    for (const auto& entry : fs::directory_iterator(root, ec))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(root);
  }
  if (ec) return make_error(ErrorCode::config_error, "listing " + root.string() + ": " + ec.message());
  sha.update("epd checkpoint v1\n");
  for (const auto& f : files) {
    // Names too: a directory's files must not trade places unnoticed.
    sha.update(f.filename().string());
    sha.update("\n", 1);
    if (auto st = hash_file(sha, f); !st) return st.error();
  }
  // The vision tower too: instances that lay images out differently must not share rooms.
  if (!model.mmproj.empty()) {
    sha.update("mmproj\n");
    if (auto st = hash_file(sha, model.mmproj); !st) return st.error();
  }
  return sha.hex();
}

protocol::Result<protocol::BuildIdentity> local_identity(const model::ModelConfig& model) {
  protocol::BuildIdentity id = protocol::current_protocol_identity();
  id.build = std::string(build_id());
  id.model_name = model.name;
  auto digest = model_digest(model);
  if (!digest) return digest.error();
  id.model_digest = std::move(*digest);
  if (const char* claim = std::getenv("EPD_TEST_PROTOCOL_REVISIONS"); claim && *claim) {
    auto range = test_revisions(claim);
    if (!range) return range.error();
    id.protocol_oldest = range->first;
    id.protocol = range->second;
    spdlog::warn(
        "test switch EPD_TEST_PROTOCOL_REVISIONS: this process claims protocol {} (it speaks {}..{})",
        protocol::describe_protocol(id), protocol::kOldestProtocolRevision, protocol::kProtocolRevision);
  }
  return id;
}

}  // namespace epd::actors
