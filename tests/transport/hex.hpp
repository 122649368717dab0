#pragma once
// Hex text for descriptors passed between test processes on a pipe.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace epd::test {

std::string to_hex(const std::vector<uint8_t>& bytes);
std::optional<std::vector<uint8_t>> from_hex(const std::string& text);

}  // namespace epd::test
