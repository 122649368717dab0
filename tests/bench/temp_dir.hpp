#pragma once
// A fresh directory under the system's temp directory, removed with everything in it at the end of scope.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace epd::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& what) {
    static std::atomic<int> n{0};
    path_ = std::filesystem::temp_directory_path() /
            ("epd-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A PNG: the 8-byte signature, then more than a trivial image's worth of bytes (a rendered plot with axes,
// labels and lines is tens of KB; an empty canvas a few KB).
inline bool is_png(const std::filesystem::path& p, size_t min_bytes = 10000) {
  const std::string bytes = read_file(p);
  return bytes.size() >= min_bytes && bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0;
}

}  // namespace epd::testing
