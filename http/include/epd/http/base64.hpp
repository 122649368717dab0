#pragma once
// Standard base64 (RFC 4648, alphabet A-Z a-z 0-9 + /, '=' padding). Images travel in the HTTP API's JSON
// as base64; clients often wrap it at 76 columns (the `base64` tool does), so the decoder skips whitespace.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::http {

// Padded output, no line breaks.
std::string base64_encode(std::span<const uint8_t> bytes);

// Accepts ASCII whitespace (space, \t, \r, \n) anywhere; everything else must be the standard alphabet with
// the length (whitespace excluded) a multiple of 4 and '=' only as the last one or two characters.
// Fails with invalid_request naming the offending character's offset, or with oversized when the decoded
// size would exceed max_bytes (checked before anything is allocated).
protocol::Result<std::vector<uint8_t>> base64_decode(std::string_view text, size_t max_bytes = SIZE_MAX);

}  // namespace epd::http
