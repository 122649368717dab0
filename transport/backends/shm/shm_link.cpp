#include "shm_link.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "epd/transport/backend_info.hpp"
#include "shm_info.hpp"
#include "stream_copy.hpp"

namespace epd::transport::shm {
namespace {

constexpr uint32_t kMaxRegionId = 1u << 16;      // ids are small and dense (engine order)
constexpr int64_t kLivenessCheckNs = 1'000'000;  // pidfd poll at most once per ms
constexpr auto now_ns = [] {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
};

// Opens another process's fd as our own; works for the same user (ptrace read access), not across users.
int open_peer_fd(int32_t pid, int32_t fd, int flags) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  return ::open(path.c_str(), flags | O_CLOEXEC);
}

Error unreachable(const protocol::SegmentDescriptor& peer, int32_t pid, const std::string& what) {
  return make_error(
      ErrorCode::peer_unreachable,
      "shm to " + peer.instance_id + " (pid " + std::to_string(pid) + "): " + what + ": " + strerror(errno));
}

}  // namespace

Result<std::unique_ptr<Link>> ShmLink::open(const protocol::SegmentDescriptor& peer) {
  const auto info = decode_info<ShmInfo>(peer, kName);
  if (!info) return make_error(ErrorCode::no_common_backend, peer.instance_id + " offers no shm");
  const int32_t pid = info->pid;
  std::unique_ptr<ShmLink> link(new ShmLink());
  link->token_ = peer.token;
  link->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // -1 on old kernels: token check only

  const int cfd = open_peer_fd(pid, info->control_fd, O_RDONLY);
  if (cfd < 0) return unreachable(peer, pid, "open control page");
  struct stat st {};
  if (fstat(cfd, &st) != 0 || static_cast<uint64_t>(st.st_size) < sizeof(ControlPage)) {
    ::close(cfd);
    return make_error(ErrorCode::peer_unreachable,
                      "shm to " + peer.instance_id + ": fd is not a control page");
  }
  void* c = mmap(nullptr, sizeof(ControlPage), PROT_READ, MAP_SHARED, cfd, 0);
  ::close(cfd);
  if (c == MAP_FAILED) return unreachable(peer, pid, "map control page");
  link->control_ = static_cast<const ControlPage*>(c);
  if (link->control_->magic != kControlMagic || link->control_->version != kControlVersion ||
      link->control_->pid != pid)
    return make_error(ErrorCode::peer_unreachable,
                      "shm to " + peer.instance_id + ": fd is not a control page");
  if (link->control_->token.load(std::memory_order_acquire) != peer.token)
    return make_error(ErrorCode::bad_token, "shm to " + peer.instance_id + ": segment token does not match");

  for (const auto& r : peer.regions) {
    if (r.id >= kMaxRegionId) return make_error(ErrorCode::out_of_range, "region id too large");
    int32_t region_fd = -1;
    for (const auto& ri : info->regions)
      if (ri.id == r.id) region_fd = ri.fd;
    const int fd = open_peer_fd(pid, region_fd, O_RDWR);
    if (fd < 0) return unreachable(peer, pid, "open region " + r.name);
    // A short file would turn writes past its end into SIGBUS: refuse it here.
    if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < r.length) {
      ::close(fd);
      return make_error(ErrorCode::peer_unreachable, "shm region " + r.name + " is smaller than described");
    }
    void* p = mmap(nullptr, r.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return unreachable(peer, pid, "map region " + r.name);
    if (link->by_id_.size() <= r.id) link->by_id_.resize(r.id + 1);
    if (link->by_id_[r.id].local) {  // ops name regions by id: two with one id would be ambiguous
      munmap(p, r.length);
      return make_error(ErrorCode::peer_unreachable,
                        "shm descriptor repeats region id " + std::to_string(r.id));
    }
    link->by_id_[r.id] = Mapping{r.base, r.length, static_cast<uint8_t*>(p)};
  }
  return std::unique_ptr<Link>(std::move(link));
}

ShmLink::~ShmLink() {
  close();
  for (auto& m : by_id_)
    if (m.local) munmap(m.local, m.length);
  if (control_) munmap(const_cast<ControlPage*>(control_), sizeof(ControlPage));
  if (pidfd_ >= 0) ::close(pidfd_);
}

Status ShmLink::check_peer() {
  // Once the peer is known dead, stay dead: the liveness poll below is throttled, so without this a write
  // within the next millisecond would "succeed" into a dead process's memory.
  if (!healthy_.load(std::memory_order_acquire)) return make_error(ErrorCode::peer_died, "shm peer is gone");
  if (control_->token.load(std::memory_order_acquire) != token_) {
    healthy_.store(false, std::memory_order_release);
    return make_error(ErrorCode::peer_died,
                      "shm peer revoked our token (it stopped its engine or rotated the token)");
  }
  if (pidfd_ < 0) return {};
  const int64_t now = now_ns();
  if (now < next_liveness_check_ns_.load(std::memory_order_relaxed)) return {};
  next_liveness_check_ns_.store(now + kLivenessCheckNs, std::memory_order_relaxed);
  pollfd p{pidfd_, POLLIN, 0};
  if (poll(&p, 1, 0) > 0) {  // a pidfd turns readable when the process exits
    healthy_.store(false, std::memory_order_release);
    return make_error(ErrorCode::peer_died, "shm peer process exited");
  }
  return {};
}

void ShmLink::submit(const BatchPtr& batch, std::span<const ResolvedOp> ops) {
  if (closed_.load(std::memory_order_acquire))
    return batch->fail(make_error(ErrorCode::session_closed, "closed"));
  if (auto st = check_peer(); !st) return batch->fail(st.error());
  for (const ResolvedOp& op : ops) {
    // The session checked the range against the descriptor; the mapping has the described length.
    const Mapping& m = by_id_[op.remote_region->id];
    copy_to_peer(m.local + (op.remote_addr - m.remote_base), op.src, op.len);
  }
  batch->part_done(ops.size());
}

void ShmLink::close() {
  closed_.store(true, std::memory_order_release);
}

}  // namespace epd::transport::shm
