#include "epd/actors/cache/content_hash.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>

namespace epd::actors {
namespace {

// Bumped if the hashed form ever changes, so old and new hashes never meet.
constexpr std::string_view kDomain = "epd image rgb8 v1";

void put_le32(uint8_t* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(v >> (8 * i));
}

// SHA-256 of a domain tag, an 8-byte header and the payload; none only if OpenSSL itself fails (the item is
// then simply not cached).
std::optional<ContentHash> digest(std::string_view domain, const uint8_t (&head)[8], const void* data,
                                  size_t bytes) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  ContentHash out{};
  unsigned int len = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), domain.data(), domain.size()) != 1 ||
      EVP_DigestUpdate(ctx.get(), head, sizeof head) != 1 || EVP_DigestUpdate(ctx.get(), data, bytes) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), out.data(), &len) != 1 || len != out.size())
    return std::nullopt;
  return out;
}

}  // namespace

std::optional<ContentHash> content_hash(const model::Image& image) {
  uint8_t dims[8];
  put_le32(dims, image.width);
  put_le32(dims + 4, image.height);
  return digest(kDomain, dims, image.rgb.data(), image.rgb.size());
}

std::optional<ContentHash> content_hash(const model::Audio& audio) {
  // A clip: its samples as the tower takes them (mono float at the one rate), under its own domain tag.
  constexpr std::string_view kAudio = "epd audio f32 16k mono v1";
  uint8_t n[8];
  put_le32(n, uint32_t(audio.samples.size()));
  put_le32(n + 4, uint32_t(uint64_t(audio.samples.size()) >> 32));
  return digest(kAudio, n, audio.samples.data(), audio.samples.size() * sizeof(float));
}

std::optional<ContentHash> content_hash(const model::Media& item) {
  return std::visit([](const auto& m) { return content_hash(m); }, item);
}

std::optional<ContentHash> images_hash(std::span<const std::optional<ContentHash>> images,
                                       std::string_view tower) {
  if (images.empty()) return std::nullopt;
  if (images.size() == 1 && tower.empty()) return images[0];
  constexpr std::string_view kImages = "epd images v1";
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  uint8_t n[8];
  put_le32(n, uint32_t(tower.size()));
  put_le32(n + 4, uint32_t(images.size()));
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), kImages.data(), kImages.size()) != 1 ||
      EVP_DigestUpdate(ctx.get(), n, sizeof n) != 1 ||
      EVP_DigestUpdate(ctx.get(), tower.data(), tower.size()) != 1)
    return std::nullopt;
  for (const auto& h : images)
    if (!h || EVP_DigestUpdate(ctx.get(), h->data(), h->size()) != 1) return std::nullopt;
  ContentHash out{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), out.data(), &len) != 1 || len != out.size()) return std::nullopt;
  return out;
}

std::optional<ContentHash> content_hash_from(std::span<const uint8_t> bytes) {
  if (bytes.size() != sizeof(ContentHash)) return std::nullopt;
  ContentHash h;
  std::copy(bytes.begin(), bytes.end(), h.begin());
  return h;
}

std::string short_hex(const ContentHash& hash) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < 6; ++i) {
    s += kHex[hash[i] >> 4];
    s += kHex[hash[i] & 15];
  }
  return s;
}

}  // namespace epd::actors
