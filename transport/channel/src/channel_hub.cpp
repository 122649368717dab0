#include "epd/transport/channel_hub.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "hub_member.hpp"

namespace epd::transport {

// The hub's thread waits on one epoll set holding every channel's descriptors (its wake-up eventfd, the
// ZMQ_FD of each socket), each tagged with the channel's key; a ready descriptor gets its whole channel
// serviced, which reads every socket of it (a simulated instance has a handful).
struct ChannelHub::Impl::State {
  int epoll_fd = -1, stop_fd = -1;
  std::atomic<bool> stopping{false};
  std::mutex mu;          // members, watched, pending, next_key
  std::mutex service_mu;  // held while a member is serviced; detach waits on it
  std::map<uint64_t, detail::HubMember*> members;
  std::map<uint64_t, std::vector<int>> watched;
  std::set<uint64_t> pending;  // serviced on the next turn without waiting
  uint64_t next_key = 1;
  std::thread::id thread_id;

  ~State() {
    if (epoll_fd >= 0) ::close(epoll_fd);
    if (stop_fd >= 0) ::close(stop_fd);
  }

  // Under mu: polls `fds` for `key` from now on instead of what it polled before.
  void rewatch(uint64_t key, const std::vector<int>& fds) {
    auto& old = watched[key];
    const std::set<int> keep(fds.begin(), fds.end());
    for (int fd : old)
      if (!keep.count(fd)) ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    const std::set<int> had(old.begin(), old.end());
    for (int fd : fds) {
      if (had.count(fd)) continue;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = key;
      if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
        spdlog::error("control hub: cannot poll descriptor {}: {}", fd, std::strerror(errno));
    }
    old = fds;
  }
};

ChannelHub::Impl::Impl(const HubConfig& c) : config(c), ctx(c.io_threads, c.max_sockets) {}

ChannelHub::Impl::~Impl() {
  if (state) {
    state->stopping.store(true);
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(state->stop_fd, &one, sizeof one);
  }
  if (thread.joinable()) thread.join();
  state.reset();
  ctx.close();
}

uint64_t ChannelHub::Impl::attach(detail::HubMember* member) {
  std::lock_guard lock(state->mu);
  const uint64_t key = state->next_key++;
  state->members[key] = member;
  state->pending.insert(key);  // its first service builds what it polls
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(state->stop_fd, &one, sizeof one);
  return key;
}

void ChannelHub::Impl::detach(uint64_t key) {
  std::unique_lock service(state->service_mu, std::defer_lock);
  if (std::this_thread::get_id() != state->thread_id) service.lock();
  std::lock_guard lock(state->mu);
  state->rewatch(key, {});
  state->watched.erase(key);
  state->members.erase(key);
  state->pending.erase(key);
}

bool ChannelHub::Impl::start() {
  state = std::make_unique<State>();
  state->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  state->stop_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // no channel has key 0
  if (state->epoll_fd < 0 || state->stop_fd < 0 ||
      ::epoll_ctl(state->epoll_fd, EPOLL_CTL_ADD, state->stop_fd, &ev) != 0)
    return false;
  thread = std::thread([this] { loop(); });
  state->thread_id = thread.get_id();  // read by detach(), only after a channel attached
  return true;
}

namespace {
// Whether the epoll set holds an event of `key` now (without waiting); every key found is serviced on the
// next turn. `events` has room for every descriptor (size_for_all), so that no waiting event is left out.
bool waiting_in_set(ChannelHub::Impl::State& s, std::vector<epoll_event>& events, uint64_t key) {
  const int n = ::epoll_wait(s.epoll_fd, events.data(), int(events.size()), 0);
  bool found = false;
  std::lock_guard lock(s.mu);
  for (int i = 0; i < n; ++i) {
    const uint64_t k = events[i].data.u64;
    found |= k == key;
    if (k != 0) s.pending.insert(k);
  }
  return found;
}

void size_for_all(ChannelHub::Impl::State& s, std::vector<epoll_event>& events) {
  std::lock_guard lock(s.mu);
  size_t fds = 1;  // the stop eventfd
  for (const auto& [_, w] : s.watched) fds += w.size();
  if (events.size() < fds) events.resize(fds);
}
}  // namespace

void ChannelHub::Impl::loop() {
  State& s = *state;
  std::vector<epoll_event> events(256), everything;
  auto next_tick = std::chrono::steady_clock::now() + config.idle_tick;
  while (!s.stopping.load()) {
    bool busy;
    {
      std::lock_guard lock(s.mu);
      busy = !s.pending.empty();
    }
    const auto now = std::chrono::steady_clock::now();
    const int timeout =
        busy ? 0
             : int(std::max<int64_t>(
                   0, std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - now).count()));
    const int n = ::epoll_wait(s.epoll_fd, events.data(), int(events.size()), timeout);
    if (n < 0 && errno != EINTR) spdlog::error("control hub: epoll_wait failed: {}", std::strerror(errno));
    std::set<uint64_t> ready, ticked;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == 0) {
        uint64_t c;
        [[maybe_unused]] auto r = ::read(s.stop_fd, &c, sizeof c);
      } else {
        ready.insert(events[i].data.u64);
      }
    }
    {
      std::lock_guard lock(s.mu);
      ready.merge(s.pending);
      s.pending.clear();
      if (std::chrono::steady_clock::now() >= next_tick) {
        for (const auto& [key, _] : s.members)
          if (!ready.count(key)) ticked.insert(key);
        next_tick = std::chrono::steady_clock::now() + config.idle_tick;
      }
    }
    for (uint64_t key : ticked) ready.insert(key);
    if (!ticked.empty()) size_for_all(s, everything);
    for (uint64_t key : ready) {
      std::lock_guard service(s.service_mu);
      detail::HubMember* member = nullptr;
      {
        std::lock_guard lock(s.mu);
        auto it = s.members.find(key);
        if (it == s.members.end()) continue;  // detached since it was ready
        member = it->second;
      }
      // The tick comes on time, busy or not: a member ticked while an event of its own waits in the set
      // (it came in while others were serviced) is not one whose signal was lost.
      const bool tick = ticked.count(key) > 0 && !waiting_in_set(s, everything, key);
      const bool more = member->service(
          [&](const std::vector<int>& fds) {
            std::lock_guard lock(s.mu);
            s.rewatch(key, fds);
          },
          tick);
      if (more) {
        std::lock_guard lock(s.mu);
        s.pending.insert(key);
      }
    }
  }
}

ChannelHub::ChannelHub(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChannelHub::~ChannelHub() = default;

Result<std::shared_ptr<ChannelHub>> ChannelHub::start(HubConfig config) {
  if (config.io_threads < 1 || config.max_sockets < 16 || config.idle_tick.count() < 1)
    return make_error(ErrorCode::config_error,
                      "control hub: io_threads >= 1, max_sockets >= 16 and idle_tick >= 1 ms");
  auto impl = std::make_unique<Impl>(config);
  if (!impl->start())
    return make_error(ErrorCode::io_error, std::string("control hub: ") + std::strerror(errno));
  return std::shared_ptr<ChannelHub>(new ChannelHub(std::move(impl)));
}

size_t ChannelHub::channels() const {
  std::lock_guard lock(impl_->state->mu);
  return impl_->state->members.size();
}

}  // namespace epd::transport
