#include "epd/model/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace epd::model {

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

protocol::Result<MappedFile> MappedFile::open(const std::string& path) {
  auto fail = [&](const char* what) {
    return protocol::make_error(protocol::ErrorCode::io_error,
                                "cannot " + std::string(what) + " '" + path + "': " + std::strerror(errno));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail("open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    auto e = fail("stat");
    ::close(fd);
    return e;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return protocol::make_error(protocol::ErrorCode::io_error, "'" + path + "' is not a regular file");
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      auto e = fail("map");
      ::close(fd);
      return e;
    }
    f.data_ = p;
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
}

}  // namespace epd::model
