#pragma once
// The identity of an image (or an audio clip) for the embedding cache: SHA-256 over the decoded pixels, never over the file
// a client sent and never a hash a client supplies. Two files that decode to the same pixels (a PPM with
// other comments, a PNG and a PPM of one raster) get one hash; a collision would hand one user's request
// another image's embeddings, so the hash must hold against crafted inputs: a cryptographic one.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "epd/model/media.hpp"

namespace epd::actors {

using ContentHash = std::array<uint8_t, 32>;

// SHA-256 of a domain tag, the width and height (little-endian 32-bit) and the RGB raster; none only if
// OpenSSL itself fails (the image is then simply not cached).
std::optional<ContentHash> content_hash(const model::Image& image);
// An audio clip's: SHA-256 of another domain tag, the sample count and the float samples (the decoded
// sound, whatever file and format it came in).
std::optional<ContentHash> content_hash(const model::Audio& audio);
std::optional<ContentHash> content_hash(const model::Media& item);

// The identity of a request's images in order, as one model's tower sees them: the image's own hash when
// it is one and `tower` is empty (the reference model), else SHA-256 over a domain tag, `tower` (which
// mmproj) and every image's hash. None if any part is none.
std::optional<ContentHash> images_hash(std::span<const std::optional<ContentHash>> images,
                                       std::string_view tower);

// The hash a peer sent (EMBED_META's content_hash): exactly 32 bytes, else none.
std::optional<ContentHash> content_hash_from(std::span<const uint8_t> bytes);

// The first bytes in hex, for logs.
std::string short_hex(const ContentHash& hash);

}  // namespace epd::actors
