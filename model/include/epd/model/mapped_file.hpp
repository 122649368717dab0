#pragma once
// A read-only memory mapping of a whole file: checkpoints are read in place, never copied into a buffer
// first.
#include <cstddef>
#include <span>
#include <string>

#include "epd/protocol/result.hpp"

namespace epd::model {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // io_error naming the path if it cannot be opened or mapped; an empty file maps to an empty span.
  static protocol::Result<MappedFile> open(const std::string& path);

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace epd::model
