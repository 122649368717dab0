#include "epd/launcher/spawn.hpp"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace epd::launcher {
namespace {

using protocol::ErrorCode;
using protocol::make_error;

// Tells the parent why the child could not become the program (errno through the error pipe).
[[noreturn]] void fail_exec(int err_w) {
  int e = errno;
  ssize_t ignored = ::write(err_w, &e, sizeof e);
  (void)ignored;
  _exit(127);
}

// Runs in the forked child of a multi-threaded process: async-signal-safe calls only, no allocation.
[[noreturn]] void exec_child(char* const* argv, pid_t parent, int out_w, int err_w) {
  if (setpgid(0, 0) != 0) fail_exec(err_w);
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) fail_exec(err_w);
  // The launcher may have died between fork and prctl: then nobody would ever signal us.
  if (getppid() != parent) _exit(1);

  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(out_w, 2) < 0) fail_exec(err_w);

  // Ignored signals and the signal mask survive exec: give the child a clean slate (the launcher
  // ignores SIGPIPE and blocks SIGINT/SIGTERM for itself).
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  // Descriptors the rest of the process opened without O_CLOEXEC must not leak into the role.
  syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);

  execv(argv[0], argv);
  fail_exec(err_w);
}

}  // namespace

protocol::Result<SpawnedChild> spawn_child(const ChildSpec& spec) {
  if (spec.argv.empty()) return make_error(ErrorCode::config_error, spec.id + ": empty command line");
  // Everything the child needs is prepared before fork: it may not allocate afterwards.
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    return make_error(ErrorCode::io_error, spec.id + ": pipe: " + strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    close(out[0]);
    close(out[1]);
    return make_error(ErrorCode::io_error, spec.id + ": pipe: " + strerror(e));
  }

  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) exec_child(argv.data(), parent, out[1], err[1]);
  int fork_errno = errno;
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    return make_error(ErrorCode::io_error, spec.id + ": fork: " + strerror(fork_errno));
  }
  // Also set the group from this side, so kill(-pid) works even before the child ran setpgid.
  setpgid(pid, pid);

  // The error pipe closes on a successful exec (O_CLOEXEC); an errno arrives if exec failed.
  int child_errno = 0;
  ssize_t n;
  do n = ::read(err[0], &child_errno, sizeof child_errno);
  while (n < 0 && errno == EINTR);
  close(err[0]);
  if (n > 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    close(out[0]);
    return make_error(ErrorCode::io_error,
                      spec.id + ": cannot execute " + spec.argv[0] + ": " + strerror(child_errno));
  }
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  return SpawnedChild{pid, out[0]};
}

}  // namespace epd::launcher
