#include "tcp_link.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "frame_check.hpp"
#include "socket_util.hpp"

namespace epd::transport::tcp {
namespace {

constexpr size_t kMaxSlicesPerSend = 32;  // header+payload pairs per sendmsg (well under IOV_MAX)
constexpr int kReaderTickMs = 50;         // how often an idle reader checks op_timeout and stop
// A batch of one slice up to this size is written by the submitting thread itself when its lane is idle,
// saving the hand-off to the lane's sender thread, which on 2 cores costs about as much as copying 64 KiB.
// Larger slices and batches of several stay on the lane threads: they coalesce frames into one sendmsg and
// copy beside the caller, and a larger write would rarely fit the socket's buffer in one non-blocking call
// (docs/transport.md, "Who writes a lane's socket").
constexpr uint64_t kCallerWritesUpTo = 64 << 10;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A nack's code as an error; a code this build does not know stays a plain transfer failure.
Error nack_error(const Reply& r, std::string text) {
  const bool known = r.code != 0 && protocol::is_known_error_code(r.code);
  return make_error(known ? static_cast<ErrorCode>(r.code) : ErrorCode::transfer_failed, std::move(text));
}

struct Slice {
  BatchPtr batch;
  const uint8_t* src;
  uint64_t len;
  uint64_t addr;
  uint64_t seq;
  uint64_t fence;
};

WriteHeader frame_header(const Slice& s, uint64_t token) {
  WriteHeader h;
  h.seq = s.seq;
  h.token = token;
  h.addr = s.addr;
  h.len = s.len;
  h.fence = s.fence;
  return h;
}

// The rest of a frame a submitter could only partly write (the socket's buffer filled): the sender thread
// writes it before anything else, so frames never interleave on the wire.
struct Tail {
  WriteHeader header;
  const uint8_t* src = nullptr;
  uint64_t sent = 0;  // bytes of header + payload already written
  bool pending = false;
};

struct Lane {
  int fd = -1;
  std::mutex mu;
  std::condition_variable cv;  // sender: work arrived, room freed, the writer left, or stop
  std::deque<Slice> queued;    // not sent yet
  std::deque<Slice> inflight;  // sent (or being sent), waiting for an ack; in seq order
  uint64_t next_seq = 1;
  bool broken = false;
  bool writing = false;  // a thread (a submitter or the sender) owns the socket's write side
  Tail tail;
  int64_t last_progress_ms = 0;
  std::thread sender, reader;
};

}  // namespace

struct LinkState {
  TcpConfig config;
  uint64_t token = 0;
  std::string peer;
  std::vector<std::unique_ptr<Lane>> lanes;
  std::atomic<uint64_t> next_lane{0};
  std::atomic<bool> healthy{true};
  std::atomic<bool> stopping{false};
  std::mutex error_mu;
  Error first_error;  // why the link broke; later submits fail with it

  ~LinkState() {
    for (auto& l : lanes)
      if (l->fd >= 0) ::close(l->fd);
  }

  Error broken_error() {
    std::lock_guard lock(error_mu);
    return first_error;
  }

  // Breaks the whole link: every queued and in-flight slice of every lane fails with `error`.
  // The first cause wins for every batch: a shutdown done here makes other lanes see EPIPE, which is an
  // effect, not the reason.
  void fail_all(const Error& cause) {
    Error error;
    {
      std::lock_guard lock(error_mu);
      if (healthy.exchange(false)) first_error = cause;
      error = first_error;
    }
    for (auto& lane : lanes) {
      std::deque<Slice> dead;
      {
        std::lock_guard lock(lane->mu);
        lane->broken = true;
        for (auto& s : lane->inflight) dead.push_back(std::move(s));
        for (auto& s : lane->queued) dead.push_back(std::move(s));
        lane->inflight.clear();
        lane->queued.clear();
      }
      lane->cv.notify_all();
      shutdown(lane->fd, SHUT_RDWR);  // wakes this lane's threads; the fd is closed when all are gone
      for (auto& s : dead) s.batch->fail(error);
    }
  }

  // Writes `slice` on the caller's thread if `lane` is idle (nothing queued, nobody writing, room in the
  // window): true if it took the slice, false (slice untouched) if the caller must queue it.
  bool write_now(Lane& lane, Slice& slice);
  void send_loop(Lane& lane);
  void send_failed(int err);
  void read_loop(Lane& lane);
  void complete(Lane& lane, const Reply& r, std::vector<BatchPtr>& done);
};

bool LinkState::write_now(Lane& lane, Slice& slice) {
  WriteHeader h;
  const uint8_t* src = slice.src;
  {
    std::lock_guard lock(lane.mu);
    if (lane.broken || lane.writing || lane.tail.pending || !lane.queued.empty() ||
        lane.inflight.size() >= config.max_inflight_slices)
      return false;
    lane.writing = true;
    if (lane.inflight.empty()) lane.last_progress_ms = now_ms();
    slice.seq = lane.next_seq++;
    h = frame_header(slice, token);
    lane.inflight.push_back(std::move(slice));  // before the bytes leave: the ack may come at once
  }
  std::array<iovec, 2> iov{iovec{&h, sizeof(h)}, iovec{const_cast<uint8_t*>(src), h.len}};
  const ssize_t sent = send_now(lane.fd, iov.data(), iov.size());
  bool wake;
  {
    std::lock_guard lock(lane.mu);
    lane.writing = false;
    if (sent >= 0 && static_cast<uint64_t>(sent) < sizeof(h) + h.len)
      lane.tail = Tail{h, src, static_cast<uint64_t>(sent), true};
    wake = lane.tail.pending || !lane.queued.empty();
  }
  if (wake) lane.cv.notify_one();
  if (sent < 0) send_failed(static_cast<int>(-sent));
  return true;
}

void LinkState::send_failed(int err) {
  if (stopping.load() || !healthy.load()) return;  // the link is going down: this error is an effect
  if (err == EAGAIN || err == EWOULDBLOCK)         // SO_SNDTIMEO ran out
    fail_all(make_error(ErrorCode::timeout, "tcp to " + peer + ": send stalled past op_timeout"));
  else
    fail_all(make_error(ErrorCode::peer_died, "tcp to " + peer + ": send failed: " + strerror(err)));
}

void LinkState::send_loop(Lane& lane) {
  std::array<WriteHeader, kMaxSlicesPerSend + 1> headers;  // [0]: a submitter's unfinished frame
  std::array<iovec, 2 * kMaxSlicesPerSend + 2> iov;
  const size_t max_inflight = config.max_inflight_slices;
  for (;;) {
    iovec* first = iov.data() + 2;
    size_t count = 0;
    {
      std::unique_lock lock(lane.mu);
      lane.cv.wait(lock, [&] {
        return lane.broken || stopping.load() ||
               (!lane.writing &&
                (lane.tail.pending || (!lane.queued.empty() && lane.inflight.size() < max_inflight)));
      });
      if (lane.broken || stopping.load()) return;
      lane.writing = true;
      if (lane.tail.pending) {
        headers[0] = lane.tail.header;
        iov[0] = {&headers[0], sizeof(WriteHeader)};
        iov[1] = {const_cast<uint8_t*>(lane.tail.src), headers[0].len};
        size_t left = 2;
        first = advance_iov(iov.data(), left, lane.tail.sent);
        count = left;
        lane.tail.pending = false;
      }
      if (lane.inflight.empty()) lane.last_progress_ms = now_ms();
      const size_t n =
          std::min({lane.queued.size(), max_inflight - std::min(max_inflight, lane.inflight.size()),
                    kMaxSlicesPerSend});
      for (size_t i = 0; i < n; ++i) {
        Slice& s = lane.inflight.emplace_back(std::move(lane.queued.front()));
        lane.queued.pop_front();
        s.seq = lane.next_seq++;
        headers[i + 1] = frame_header(s, token);
        first[count++] = {&headers[i + 1], sizeof(WriteHeader)};
        first[count++] = {const_cast<uint8_t*>(s.src), s.len};
      }
    }
    // Acks for these slices can only arrive after their bytes left, so the reader never races this send.
    const int err = send_iov(lane.fd, first, count);
    {
      std::lock_guard lock(lane.mu);
      lane.writing = false;
    }
    if (err != 0) {
      send_failed(err);
      return;
    }
  }
}

void LinkState::complete(Lane& lane, const Reply& r, std::vector<BatchPtr>& done) {
  // Pops the acknowledged slices under the lock; completes their batches after releasing it, because a
  // completion callback may submit again on this link.
  BatchPtr refused;
  Error why;
  bool protocol_error = false;
  bool hello_refused = false;
  {
    std::lock_guard lock(lane.mu);
    const bool was_full = lane.inflight.size() >= config.max_inflight_slices;
    if (reply_well_formed(r) && r.type == kTypeNack && r.seq == 0) {
      hello_refused = true;  // seq 0 is the lane's hello: the receiver closes it
    } else if (!reply_well_formed(r) || lane.inflight.empty() || r.seq < lane.inflight.front().seq ||
               r.seq > lane.inflight.back().seq) {
      protocol_error = true;
    } else {
      while (lane.inflight.front().seq < r.seq) {
        done.push_back(std::move(lane.inflight.front().batch));
        lane.inflight.pop_front();
      }
      Slice& last = lane.inflight.front();  // seq == r.seq
      if (r.type == kTypeAck) {
        done.push_back(std::move(last.batch));
      } else {
        why = nack_error(r,
                         fmt::format("tcp receiver {} refused {} bytes at {:#x}", peer, last.len, last.addr));
        refused = std::move(last.batch);
      }
      lane.inflight.pop_front();
      lane.last_progress_ms = now_ms();
    }
    if (was_full) lane.cv.notify_one();
  }
  if (hello_refused) {
    fail_all(
        nack_error(r, "tcp receiver " + peer + " refused the lane's token (a stale segment descriptor)"));
    return;
  }
  if (protocol_error) {
    fail_all(
        make_error(ErrorCode::transfer_failed, "tcp to " + peer + ": unexpected reply from the receiver"));
    return;
  }
  for (auto& b : done) b->part_done();
  done.clear();
  if (refused) refused->fail(std::move(why));
}

void LinkState::read_loop(Lane& lane) {
  std::array<uint8_t, 4096> buf;
  size_t have = 0;
  std::vector<BatchPtr> done;
  done.reserve(64);
  for (;;) {
    pollfd p{lane.fd, POLLIN, 0};
    const int r = poll(&p, 1, kReaderTickMs);
    if (stopping.load() || !healthy.load()) return;
    if (r == 0) {
      bool stalled;
      {
        std::lock_guard lock(lane.mu);
        stalled = !lane.inflight.empty() && now_ms() - lane.last_progress_ms > config.op_timeout.count();
      }
      if (stalled) {
        fail_all(make_error(ErrorCode::timeout, "tcp to " + peer + ": no ack for " +
                                                    std::to_string(config.op_timeout.count()) + " ms"));
        return;
      }
      continue;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      fail_all(make_error(ErrorCode::io_error, std::string("poll: ") + strerror(errno)));
      return;
    }
    const ssize_t n = recv(lane.fd, buf.data() + have, buf.size() - have, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      if (stopping.load()) return;
      fail_all(make_error(ErrorCode::peer_died, "tcp to " + peer + ": connection lost" +
                                                    (n < 0 ? std::string(": ") + strerror(errno) : "")));
      return;
    }
    have += static_cast<size_t>(n);
    size_t off = 0;
    for (; have - off >= sizeof(Reply); off += sizeof(Reply)) {
      Reply reply;
      std::memcpy(&reply, buf.data() + off, sizeof(reply));
      complete(lane, reply, done);
      if (!healthy.load()) return;
    }
    std::memmove(buf.data(), buf.data() + off, have - off);
    have -= off;
  }
}

Result<std::unique_ptr<Link>> TcpLink::open(const protocol::SegmentDescriptor& peer,
                                            const std::string& endpoint, const TcpConfig& config) {
  auto ep = parse_endpoint(endpoint);
  if (!ep) return ep.error();
  auto state = std::make_shared<LinkState>();
  state->config = config;
  state->config.slice_bytes = std::clamp<uint64_t>(config.slice_bytes, 4096, kMaxFrameBytes);
  state->config.max_inflight_slices = std::max<uint32_t>(config.max_inflight_slices, 1);
  state->token = peer.token;
  state->peer = peer.instance_id + "@" + endpoint;
  const uint32_t lanes = std::max<uint32_t>(config.lanes, 1);
  for (uint32_t i = 0; i < lanes; ++i) {
    auto fd = connect_to(*ep, config.connect_timeout, config.op_timeout);
    if (!fd) return fd.error();  // LinkState's destructor closes the lanes opened so far
    auto lane = std::make_unique<Lane>();
    lane->fd = *fd;
    state->lanes.push_back(std::move(lane));
    WriteHeader hello;
    hello.type = kTypeHello;
    hello.token = peer.token;
    if (!send_exact(*fd, &hello, sizeof(hello)))
      return make_error(ErrorCode::peer_unreachable,
                        "tcp to " + state->peer + ": the lane closed at its hello");
  }
  for (auto& lane : state->lanes) {
    Lane* l = lane.get();
    // Threads keep the state alive, so close() may run on one of them (a completion callback) safely.
    l->sender = std::thread([state, l] { state->send_loop(*l); });
    l->reader = std::thread([state, l] { state->read_loop(*l); });
  }
  return std::unique_ptr<Link>(new TcpLink(std::move(state)));
}

TcpLink::~TcpLink() {
  close();
}

void TcpLink::submit(const BatchPtr& batch, std::span<const ResolvedOp> ops) {
  LinkState& s = *state_;
  if (s.stopping.load()) return batch->fail(make_error(ErrorCode::session_closed, "tcp link closed"));
  if (!s.healthy.load()) return batch->fail(s.broken_error());
  const uint64_t slice = s.config.slice_bytes;
  uint64_t extra = 0;
  for (const ResolvedOp& op : ops) extra += (op.len + slice - 1) / slice - 1;
  if (extra) batch->add_parts(extra);  // before any slice can complete
  const size_t nlanes = s.lanes.size();
  const bool caller_writes = ops.size() == 1 && ops[0].len <= std::min(slice, kCallerWritesUpTo);
  bool broken = false;
  for (const ResolvedOp& op : ops) {
    for (uint64_t off = 0; off < op.len && !broken; off += slice) {
      Lane& lane = *s.lanes[s.next_lane.fetch_add(1, std::memory_order_relaxed) % nlanes];
      Slice piece{batch, op.src + off, std::min(slice, op.len - off), op.remote_addr + off, 0, op.fence};
      if (caller_writes && s.write_now(lane, piece)) continue;
      {
        std::lock_guard lock(lane.mu);
        broken = lane.broken;
        if (!broken) lane.queued.push_back(std::move(piece));
      }
      lane.cv.notify_one();
    }
  }
  // A lane broke or the link closed while we queued: the slices already queued were failed with it.
  if (s.stopping.load())
    batch->fail(make_error(ErrorCode::session_closed, "tcp link closed"));
  else if (!s.healthy.load())
    batch->fail(s.broken_error());
}

void TcpLink::close() {
  LinkState& s = *state_;
  if (s.stopping.exchange(true)) return;
  for (auto& lane : s.lanes) {
    {
      std::lock_guard lock(lane->mu);  // pairs with the sender's wait predicate
    }
    lane->cv.notify_all();
    shutdown(lane->fd, SHUT_RDWR);
  }
  const auto self = std::this_thread::get_id();
  for (auto& lane : s.lanes) {
    for (std::thread* t : {&lane->sender, &lane->reader}) {
      if (!t->joinable()) continue;
      if (t->get_id() == self)
        t->detach();  // closing from a completion callback on this very thread
      else
        t->join();
    }
  }
  // Nothing runs any more (or the one detached thread is on its way out): fail what is left.
  for (auto& lane : s.lanes) {
    std::deque<Slice> dead;
    {
      std::lock_guard lock(lane->mu);
      lane->broken = true;
      dead.swap(lane->inflight);
      for (auto& sl : lane->queued) dead.push_back(std::move(sl));
      lane->queued.clear();
    }
    for (auto& sl : dead) sl.batch->fail(make_error(ErrorCode::session_closed, "tcp link closed"));
  }
}

bool TcpLink::healthy() const {
  return state_->healthy.load() && !state_->stopping.load();
}

}  // namespace epd::transport::tcp
