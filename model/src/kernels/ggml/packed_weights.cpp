#include "kernels/ggml/packed_weights.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace epd::model::ggml {
namespace {

namespace fs = std::filesystem;
using protocol::ErrorCode;
using protocol::make_error;

constexpr char kMagic[8] = {'E', 'P', 'D', 'P', 'A', 'C', 'K', '1'};
constexpr size_t kPage = 4096;

size_t round_up(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}

// Header: magic, identity length (u64), data checksum (XXH3-64 of everything after the header, u64), the
// identity; the matrices follow at page-aligned offsets.
struct Layout {
  std::string identity;
  size_t header = 0;
  std::vector<size_t> offsets;
  size_t size = 0;
};

std::string file_identity(const std::string& path) {
  struct stat st {};
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (::stat(path.c_str(), &st) != 0) return {};
  return (ec ? path : real.string()) + " dev " + std::to_string(st.st_dev) + " ino " +
         std::to_string(st.st_ino) + " size " + std::to_string(st.st_size) + " mtime " +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

Layout layout_for(const std::string& model_path, std::span<const PackedWeights::Matrix> matrices,
                  const Library& lib) {
  Layout l;
  l.identity = "epd packed weights 1\nmodel " + file_identity(model_path) + "\nggml " +
               file_identity(lib.dir() + "/libggml-cpu-" + lib.cpu_variant() + ".so") + "\n";
  for (const auto& m : matrices)
    l.identity += "matrix " + m.tensor->name + " " + std::string(tensor_type_name(m.tensor->type)) + " " +
                  std::to_string(m.tensor->shape[0]) + "x" + std::to_string(m.tensor->shape.back()) + " " +
                  m.packing.name + "\n";
  l.header = round_up(sizeof kMagic + 16 + l.identity.size(), kPage);
  size_t at = l.header;
  for (const auto& m : matrices) {
    l.offsets.push_back(at);
    at = round_up(at + m.tensor->bytes.size(), kPage);
  }
  l.size = at;
  return l;
}

uint64_t checksum(const std::byte* base, const Layout& l) {
  return XXH3_64bits(base + l.header, l.size - l.header);
}

std::string cache_name(const Layout& l) {
  const XXH128_hash_t h = XXH3_128bits(l.identity.data(), l.identity.size());
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string("packed-") + hex + ".bin";
}

// The matrices repacked into `dst` (l.size bytes), header last but the checksum.
protocol::Status fill(std::byte* dst, const Layout& l, std::span<const PackedWeights::Matrix> matrices,
                      const Library& lib) {
  for (size_t i = 0; i < matrices.size(); ++i) {
    const TensorRef& t = *matrices[i].tensor;
    if (auto st = lib.repack(t.type, static_cast<int64_t>(t.shape[0]), static_cast<int64_t>(t.shape.back()),
                             t.bytes.data(), dst + l.offsets[i]);
        !st)
      return st;
  }
  const uint64_t id_len = l.identity.size(), sum = checksum(dst, l);
  std::memcpy(dst + sizeof kMagic, &id_len, 8);
  std::memcpy(dst + sizeof kMagic + 8, &sum, 8);
  std::memcpy(dst + sizeof kMagic + 16, l.identity.data(), l.identity.size());
  std::memcpy(dst, kMagic, sizeof kMagic);
  return {};
}

// A read-only shared mapping of `path` if it is this layout's complete file, else null.
const std::byte* map_if_valid(const std::string& path, const Layout& l) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == l.size)
    p = ::mmap(nullptr, l.size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  const auto* b = static_cast<const std::byte*>(p);
  uint64_t id_len = 0, sum = 0;
  std::memcpy(&id_len, b + sizeof kMagic, 8);
  std::memcpy(&sum, b + sizeof kMagic + 8, 8);
  const bool ok = std::memcmp(b, kMagic, sizeof kMagic) == 0 && id_len == l.identity.size() &&
                  std::memcmp(b + sizeof kMagic + 16, l.identity.data(), id_len) == 0 &&
                  sum == checksum(b, l);
  if (!ok) {
    ::munmap(p, l.size);
    return nullptr;
  }
  return b;
}

// Writes the file under a temporary name and renames it into place. An error leaves no file behind.
protocol::Status write_file(const std::string& path, const Layout& l,
                            std::span<const PackedWeights::Matrix> matrices, const Library& lib) {
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return make_error(ErrorCode::io_error, "cannot create " + tmp + ": " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return make_error(ErrorCode::io_error, what);
  };
  if (::ftruncate(fd, static_cast<off_t>(l.size)) != 0)
    return fail("cannot size " + tmp + ": " + std::strerror(errno));
  void* p = ::mmap(nullptr, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("cannot map " + tmp + ": " + std::strerror(errno));
  auto st = fill(static_cast<std::byte*>(p), l, matrices, lib);
  ::munmap(p, l.size);
  if (!st) return fail(st.error().detail);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return fail("cannot rename " + tmp + ": " + std::strerror(errno));
  ::close(fd);
  return {};
}

// The original matrices were read to repack them; nothing multiplies by them any more, so their pages
// leave this process (they stay in the page cache for the next process that repacks, if any).
void release(std::span<const PackedWeights::Matrix> matrices) {
  for (const auto& m : matrices) {
    const auto begin = reinterpret_cast<uintptr_t>(m.tensor->bytes.data());
    const uintptr_t lo = round_up(begin, kPage), hi = (begin + m.tensor->bytes.size()) / kPage * kPage;
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }
}

// Files in the cache made from a model file that is gone or has changed since (their header names it), and
// temporary files a crashed writer left an hour ago or more, are removed when a new file is written: a cache
// of the models on the host, not of every file ever loaded. A file another process holds the lock of stays.
void prune(const std::string& dir, const std::string& keep) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string path = e.path().string(), name = e.path().filename().string();
    if (path == keep || !name.starts_with("packed-")) continue;
    if (name.find(".bin.") != std::string::npos) {  // mkstemp's suffix: an unfinished write
      std::error_code tec;
      if (now - fs::last_write_time(e.path(), tec) > std::chrono::hours(1) && !tec) fs::remove(e.path(), tec);
      continue;
    }
    if (!name.ends_with(".bin")) continue;
    std::string header(kPage, '\0');
    {
      std::ifstream in(path, std::ios::binary);
      in.read(header.data(), kPage);
      header.resize(static_cast<size_t>(in.gcount()));
    }
    const size_t at = header.find("\nmodel "), end = at == std::string::npos ? at : header.find('\n', at + 1);
    if (end == std::string::npos) continue;
    const std::string recorded = header.substr(at + 7, end - at - 7);
    const std::string model = recorded.substr(0, recorded.find(" dev "));
    if (file_identity(model) == recorded) continue;  // still the file it was made from
    const int lock = ::open((path + ".lock").c_str(), O_RDWR | O_CLOEXEC);
    if (lock >= 0 && ::flock(lock, LOCK_EX | LOCK_NB) == 0) {
      std::error_code rec;
      fs::remove(path, rec);
      fs::remove(path + ".lock", rec);
    }
    if (lock >= 0) ::close(lock);
  }
}

}  // namespace

std::string PackedWeights::default_cache_dir() {
  if (const char* d = std::getenv("EPD_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/epd";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/epd";
  return {};
}

PackedWeights::~PackedWeights() {
  if (shared_ && base_) ::munmap(const_cast<std::byte*>(base_), size_);
}

protocol::Result<std::shared_ptr<const PackedWeights>> PackedWeights::build(const std::string& model_path,
                                                                            std::span<const Matrix> matrices,
                                                                            const Library& lib,
                                                                            const std::string& cache_dir) {
  std::shared_ptr<PackedWeights> pw(new PackedWeights());
  const Layout l = layout_for(model_path, matrices, lib);
  pw->offsets_ = l.offsets;
  pw->size_ = l.size;
  for (const auto& m : matrices) pw->packings_.push_back(m.packing);
  if (matrices.empty()) {
    pw->where_ = "nothing to repack";
    return std::shared_ptr<const PackedWeights>(std::move(pw));
  }

  std::string why_private = "no cache directory ($EPD_CACHE_DIR, $XDG_CACHE_HOME or $HOME)";
  if (!cache_dir.empty()) {
    std::error_code ec;
    fs::create_directories(cache_dir, ec);
    const std::string path = cache_dir + "/" + cache_name(l);
    const int lock = ::open((path + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (lock < 0) {
      why_private = "cannot lock " + path + ".lock: " + std::strerror(errno);
    } else {
      ::flock(lock, LOCK_EX);  // one writer; the others wait and map its file
      const std::byte* b = map_if_valid(path, l);
      protocol::Status written;
      if (!b) {
        written = write_file(path, l, matrices, lib);
        if (written) b = map_if_valid(path, l);
        release(matrices);
        prune(cache_dir, path);
      }
      ::flock(lock, LOCK_UN);
      ::close(lock);
      if (b) {
        pw->base_ = b;
        pw->shared_ = true;
        pw->where_ = path;
        return std::shared_ptr<const PackedWeights>(std::move(pw));
      }
      why_private = written ? "the written file " + path + " did not read back" : written.error().detail;
    }
  }
  pw->private_.resize(l.size);
  if (auto st = fill(pw->private_.data(), l, matrices, lib); !st) return st.error();
  release(matrices);
  pw->base_ = pw->private_.data();
  pw->where_ = "private memory: " + why_private;
  return std::shared_ptr<const PackedWeights>(std::move(pw));
}

}  // namespace epd::model::ggml
