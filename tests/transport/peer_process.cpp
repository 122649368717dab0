#include "peer_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "epd/protocol/codec.hpp"
#include "hex.hpp"

namespace epd::test {

PeerProcess::PeerProcess(const std::string& instance, const std::string& offer, int regions,
                         uint64_t region_bytes) {
  signal(SIGPIPE, SIG_IGN);  // a command to a child that died must fail, not kill the test
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return;
  }
  const std::string nregions = std::to_string(regions), nbytes = std::to_string(region_bytes);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    execl(EPD_TRANSPORT_PEER, EPD_TRANSPORT_PEER, instance.c_str(), offer.c_str(), nregions.c_str(),
          nbytes.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
  if (pid_ < 0) return;
  auto line = read_line(std::chrono::seconds(10));
  if (!line || line->rfind("DESC ", 0) != 0) return;
  auto bytes = from_hex(line->substr(5));
  if (!bytes) return;
  auto desc = protocol::decode_value<protocol::SegmentDescriptor>(*bytes);
  if (desc) desc_ = std::move(desc).value();
}

PeerProcess::~PeerProcess() {
  kill_now();
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
}

void PeerProcess::kill_now() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  // SIGKILL cannot be ignored; the bound only guards against a kernel that is very slow to reap.
  for (int i = 0; i < 5000; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  pid_ = -1;
}

std::optional<std::string> PeerProcess::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{from_child_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[65536];
    const ssize_t n = read(from_child_, buf, sizeof(buf));
    if (n <= 0) return std::nullopt;
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

std::optional<std::string> PeerProcess::command(const std::string& line) {
  if (pid_ <= 0) return std::nullopt;
  const std::string l = line + "\n";
  if (write(to_child_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) return std::nullopt;
  return read_line(std::chrono::seconds(20));
}

std::optional<uint64_t> PeerProcess::checksum(uint64_t addr, uint64_t len) {
  auto r = command("sum " + std::to_string(addr) + " " + std::to_string(len));
  if (!r || r->rfind("SUM ", 0) != 0) return std::nullopt;
  return std::stoull(r->substr(4));
}

bool PeerProcess::fill(uint64_t addr, uint64_t len, uint8_t byte) {
  auto r = command("fill " + std::to_string(addr) + " " + std::to_string(len) + " " + std::to_string(byte));
  return r && *r == "OK";
}

}  // namespace epd::test
