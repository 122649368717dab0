#include "plot.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

extern char** environ;

namespace epd::bench {
namespace {

namespace fs = std::filesystem;

const char* const kMissing =
    "gnuplot not found on PATH: install the Debian package gnuplot-nox (scripts/setup-deps installs it)";

std::string gnuplot_on_path() {
  const char* path = std::getenv("PATH");
  return find_gnuplot(path ? path : "/usr/local/bin:/usr/bin:/bin");
}

// gnuplot's stderr, without trailing blank lines and cut to a screenful.
std::string tidy(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.size() > 4000) s = s.substr(0, 4000) + "\n...";
  return s.empty() ? "(nothing on stderr)" : s;
}

}  // namespace

std::string find_gnuplot(const std::string& path) {
  for (size_t pos = 0; pos <= path.size();) {
    size_t end = path.find(':', pos);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end > pos ? path.substr(pos, end - pos) : ".";  // an empty entry is "."
    const std::string candidate = dir + "/gnuplot";
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    pos = end + 1;
  }
  return "";
}

std::string prepare_plot_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    return "cannot create plot directory " + dir.string() + ": " +
           (ec ? ec.message() : std::string("not a directory"));
  if (::access(dir.c_str(), W_OK) != 0)
    return "cannot write to plot directory " + dir.string() + ": " + std::strerror(errno);
  if (gnuplot_on_path().empty()) return kMissing;
  return "";
}

std::string write_plot(const fs::path& dir, const Plot& plot) {
  auto write = [&](const std::string& name, const std::string& text) -> std::string {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    return out ? "" : "cannot write " + (dir / name).string();
  };
  for (const DataFile& d : plot.data)
    if (auto e = write(d.name, d.text); !e.empty()) return e;
  return write(plot.script_file(), plot.script);
}

std::string run_gnuplot(const fs::path& dir, const std::string& script) {
  const std::string gnuplot = gnuplot_on_path();
  if (gnuplot.empty()) return kMissing;
  int err[2];
  if (::pipe2(err, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  // No shell: stdin and stdout are /dev/null, stderr is collected, the working directory is DIR (the
  // script names its files relative to it).
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  std::string arg0 = "gnuplot", arg1 = script;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, gnuplot.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err[1]);
  if (rc != 0) {
    ::close(err[0]);
    return "cannot run " + gnuplot + " in " + dir.string() + ": " + std::strerror(rc);
  }
  std::string stderr_text;
  char buf[4096];
  for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    stderr_text.append(buf, size_t(n));
  }
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status));
  return "gnuplot " + script + " in " + dir.string() + " failed (" + how + "):\n" + tidy(stderr_text);
}

std::string render_plot(const fs::path& dir, const Plot& plot) {
  if (!plot.error.empty()) return plot.name + ": " + plot.error;
  if (auto e = prepare_plot_dir(dir); !e.empty()) return e;
  if (auto e = write_plot(dir, plot); !e.empty()) return e;
  std::error_code ec;
  fs::remove(dir / plot.png_file(), ec);  // a PNG left by an earlier run must not pass for this one
  if (auto e = run_gnuplot(dir, plot.script_file()); !e.empty()) return e;
  if (fs::file_size(dir / plot.png_file(), ec) == 0 || ec)
    return "gnuplot " + plot.script_file() + " wrote no " + (dir / plot.png_file()).string();
  return "";
}

}  // namespace epd::bench
