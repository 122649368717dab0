#pragma once
// GPT-2's byte-to-unicode table: byte-level BPE spells every byte as one printable character (printable
// Latin-1 bytes as themselves, the rest as U+0100 onwards), so vocabularies and merges are UTF-8 text.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace epd::model::detail {

// The UTF-8 spelling of byte b's character.
const std::string& byte_char(unsigned char b);
// Byte-level spelling of raw bytes.
std::string to_byte_level(std::string_view bytes);
// Raw bytes of a byte-level spelling; characters outside the table stay as they are.
std::string from_byte_level(std::string_view spelled);
// Text with every invalid UTF-8 byte replaced by U+FFFD (as llama.cpp does before splitting), so the
// regex engine only ever sees valid UTF-8.
std::string sanitize_utf8(std::string_view text);
// Length of the valid UTF-8 character at text[i], 0 if none starts there.
size_t valid_utf8_at(std::string_view text, size_t i);

}  // namespace epd::model::detail
