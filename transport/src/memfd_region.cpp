#include "memfd_region.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace epd::transport::detail {

uint64_t page_size() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

Result<Region> create_memfd_region(const std::string& memfd_name, uint64_t bytes) {
  const uint64_t page = page_size();
  if (bytes == 0) return make_error(ErrorCode::config_error, "region of 0 bytes");
  if (bytes > (uint64_t{1} << 46)) return make_error(ErrorCode::config_error, "region larger than 64 TiB");
  const uint64_t length = (bytes + page - 1) / page * page;
  // CLOEXEC: children must not inherit it; same-host peers open /proc/<pid>/fd/<fd>, which works regardless.
  const int fd = memfd_create(memfd_name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return make_error(ErrorCode::io_error, "memfd_create: " + std::string(strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
    const int e = errno;
    close(fd);
    return make_error(ErrorCode::io_error, "ftruncate memfd: " + std::string(strerror(e)));
  }
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return make_error(ErrorCode::io_error, "mmap memfd: " + std::string(strerror(e)));
  }
  Region r;
  r.base = static_cast<uint8_t*>(p);
  r.length = length;
  r.fd = fd;
  return r;  // fresh memfd pages are zero; nothing is touched so no memory is committed yet
}

void destroy_memfd_region(Region& region) {
  if (region.base) munmap(region.base, region.length);
  if (region.fd >= 0) close(region.fd);
  region.base = nullptr;
  region.fd = -1;
}

}  // namespace epd::transport::detail
