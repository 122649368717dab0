// The three string helpers of llama.cpp's common.cpp that json_schema_to_grammar calls (common.h declares
// them), written again so that none of the rest of common.cpp (logging, downloads, ...) is compiled in.
// Same results; string_repeat refuses to build more than 16 MiB, which no grammar a request may carry
// needs (a schema's bounds are numbers a client chooses).
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

std::string string_join(const std::vector<std::string>& values, const std::string& separator) {
  std::ostringstream result;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) result << separator;
    result << values[i];
  }
  return result.str();
}

std::vector<std::string> string_split(const std::string& str, const std::string& delimiter) {
  std::vector<std::string> parts;
  size_t start = 0;
  size_t end = str.find(delimiter);
  while (end != std::string::npos) {
    parts.push_back(str.substr(start, end - start));
    start = end + delimiter.length();
    end = str.find(delimiter, start);
  }
  parts.push_back(str.substr(start));
  return parts;
}

std::string string_repeat(const std::string& str, size_t n) {
  constexpr size_t kMaxBytes = size_t{16} << 20;
  if (n != 0 && str.length() > kMaxBytes / n) throw std::length_error("the grammar would be too large");
  std::string result;
  result.reserve(str.length() * n);
  for (size_t i = 0; i < n; ++i) result += str;
  return result;
}
