// shm backend: serves by exporting a control page; connects by mapping the peer's memfds (see shm_link.hpp).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "control_page.hpp"
#include "epd/transport/backend_info.hpp"
#include "shm_info.hpp"
#include "shm_link.hpp"

namespace epd::transport {
namespace shm {
namespace {

class ShmBackend final : public Backend {
 public:
  ShmBackend(int fd, ControlPage* page) : fd_(fd), page_(page) {}
  ~ShmBackend() override {
    page_->token.store(0, std::memory_order_release);  // writers still mapped see the engine is gone
    munmap(page_, kPage);
    ::close(fd_);
  }

  std::vector<uint8_t> connection_info(std::span<const Region* const> regions) const override {
    ShmInfo info{page_->pid, fd_, {}};
    for (const Region* r : regions) info.regions.push_back({r->id, r->fd});
    return encode_info(info);
  }
  bool can_reach(const protocol::SegmentDescriptor& self,
                 const protocol::SegmentDescriptor& peer) const override {
    if (peer.host_id.empty() || peer.host_id != self.host_id) return false;
    const auto info = decode_info<ShmInfo>(peer, kName);
    return info && info->pid > 0 && info->control_fd >= 0;
  }
  Status on_region_added(Region&) override { return {}; }  // regions are memfds already
  Result<std::unique_ptr<Link>> connect(const protocol::SegmentDescriptor& peer) override {
    return ShmLink::open(peer);
  }
  // Links check the control page's token on every batch: links opened under the old one fail their next
  // batch (peer_died), and new ones need the new descriptor.
  void set_token(uint64_t token) override { page_->token.store(token, std::memory_order_release); }

  static constexpr size_t kPage = 4096;

 private:
  int fd_;
  ControlPage* page_;
};

}  // namespace
}  // namespace shm

namespace {

Result<std::unique_ptr<Backend>> make_shm_backend(const BackendContext& ctx) {
  using shm::ControlPage;
  const int fd = memfd_create(("epd:" + ctx.config.instance_id + ":shm-control").c_str(), MFD_CLOEXEC);
  if (fd < 0) return make_error(ErrorCode::io_error, std::string("memfd_create: ") + strerror(errno));
  if (ftruncate(fd, shm::ShmBackend::kPage) != 0) {
    ::close(fd);
    return make_error(ErrorCode::io_error, std::string("ftruncate: ") + strerror(errno));
  }
  void* p = mmap(nullptr, shm::ShmBackend::kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return make_error(ErrorCode::io_error, std::string("mmap: ") + strerror(errno));
  }
  auto* page = new (p) ControlPage{
      shm::kControlMagic, shm::kControlVersion, static_cast<int32_t>(getpid()), ctx.incarnation, {}};
  page->token.store(ctx.token, std::memory_order_release);
  return std::unique_ptr<Backend>(new shm::ShmBackend(fd, page));
}

// A same-host peer whose pid no longer exists writes nothing any more.
bool shm_peer_gone(const protocol::SegmentDescriptor& peer) {
  const auto info = decode_info<shm::ShmInfo>(peer, shm::kName);
  return info && info->pid > 0 && ::kill(info->pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

namespace backends {
const BackendPlugin& shm_plugin() {
  static const BackendPlugin plugin{
      .name = shm::kName,
      .summary = "same host: the writer maps the target's memfds and copies with memcpy",
      .caps = {.same_host_only = true},
      .preference = 10,
      .option_keys = {},
      .check_options = nullptr,
      .make = &make_shm_backend,
      .peer_gone = &shm_peer_gone,
  };
  return plugin;
}
}  // namespace backends

}  // namespace epd::transport
