#include "epd/transport/curve_keys.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "epd/protocol/codec.hpp"

namespace epd::transport {
namespace {

Error bad(const std::filesystem::path& file, const std::string& what) {
  return make_error(ErrorCode::config_error, file.string() + ": " + what);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Writes `text` to `file` with mode 0600 from the first byte on (never world-readable for a moment).
Status write_private(const std::filesystem::path& file, const std::string& text, bool replace) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (replace ? O_TRUNC : O_EXCL), 0600);
  if (fd < 0) return bad(file, std::string("cannot create: ") + std::strerror(errno));
  const bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  ::close(fd);
  if (!ok) return bad(file, "cannot write");
  return {};
}

}  // namespace

Result<CurveKeyPair> generate_curve_key_pair() {
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    return make_error(ErrorCode::io_error, "zmq_curve_keypair failed (libzmq built without CURVE?)");
  return CurveKeyPair{pub, sec};
}

bool valid_curve_key(const std::string& z85) {
  uint8_t raw[32];
  return z85.size() == 40 && zmq_z85_decode(raw, z85.c_str()) != nullptr;
}

Result<CurveKeyPair> read_curve_key_file(const std::filesystem::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0)
    return bad(file, "cannot read the key file: " + std::string(std::strerror(errno)));
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return bad(file, "the key file holds a secret key but group or others may access it (chmod 600 it)");
  std::ifstream in(file);
  if (!in) return bad(file, "cannot open the key file");
  CurveKeyPair pair;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    const std::string key = eq == std::string::npos ? "" : trim(line.substr(0, eq));
    std::string value = eq == std::string::npos ? "" : trim(line.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    std::string* slot = key == "public" ? &pair.public_key : key == "secret" ? &pair.secret_key : nullptr;
    if (!slot)
      return bad(file, "line " + std::to_string(n) + ": expected public = \"...\" or secret = \"...\"");
    if (!valid_curve_key(value))
      return bad(file,
                 "line " + std::to_string(n) + ": '" + key + "' is not a Z85 CURVE key (40 characters)");
    *slot = value;
  }
  if (pair.public_key.empty() || pair.secret_key.empty())
    return bad(file, "the key file needs both 'public' and 'secret'");
  // The public key must be the secret's: a pasted mismatch would fail every handshake, far from its cause.
  char derived[41] = {};
  if (zmq_curve_public(derived, pair.secret_key.c_str()) != 0 || pair.public_key != derived)
    return bad(file, "'public' is not the public key of 'secret'");
  return pair;
}

Result<std::vector<std::pair<std::string, std::string>>> read_authorized_keys(
    const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return bad(file, "cannot open the authorized keys file");
  std::vector<std::pair<std::string, std::string>> out;
  std::map<std::string, std::string> seen_keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string id, key, extra;
    fields >> id >> key >> extra;
    const std::string where = "line " + std::to_string(n) + ": ";
    if (key.empty() || !extra.empty()) return bad(file, where + "expected 'ID PUBLICKEY'");
    if (!protocol::valid_instance_id(id)) return bad(file, where + "'" + id + "' is not a valid instance id");
    if (!valid_curve_key(key))
      return bad(file, where + "the key of '" + id + "' is not a Z85 CURVE key (40 characters)");
    for (const auto& [i, _] : out)
      if (i == id) return bad(file, where + "'" + id + "' is listed twice");
    if (auto [it, fresh] = seen_keys.emplace(key, id); !fresh)
      return bad(file, where + "'" + id + "' has the same key as '" + it->second + "'");
    out.emplace_back(id, key);
  }
  return out;
}

Result<std::vector<std::filesystem::path>> write_cluster_keys(const std::filesystem::path& dir,
                                                              const std::vector<std::string>& ids,
                                                              bool force) {
  if (ids.empty()) return make_error(ErrorCode::config_error, "no instance ids given");
  for (const auto& id : ids)
    if (!protocol::valid_instance_id(id) || id.find('/') != std::string::npos || id[0] == '.')
      return make_error(ErrorCode::config_error, "'" + id + "' is not a usable instance id for a key file");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return bad(dir, "cannot create the directory: " + ec.message());
  const auto pub_file = dir / "cluster.pub";
  std::map<std::string, std::string> listed;
  if (std::filesystem::exists(pub_file)) {
    auto existing = read_authorized_keys(pub_file);
    if (!existing) return existing.error();
    for (auto& [id, key] : *existing) listed[id] = key;
  }
  for (const auto& id : ids)
    if (!force && std::filesystem::exists(dir / (id + ".key")))
      return bad(dir / (id + ".key"), "exists; pass --force to replace it (its old key stops working)");
  std::vector<std::filesystem::path> written;
  for (const auto& id : ids) {
    auto pair = generate_curve_key_pair();
    if (!pair) return pair.error();
    const auto file = dir / (id + ".key");
    const std::string text = "# epd CURVE key pair of instance '" + id +
                             "'. Keep it secret (mode 0600).\npublic = \"" + pair->public_key +
                             "\"\nsecret = \"" + pair->secret_key + "\"\n";
    if (auto st = write_private(file, text, force); !st) return st.error();
    listed[id] = pair->public_key;
    written.push_back(file);
  }
  std::ostringstream pub;
  pub << "# epd authorized control-plane keys: ID PUBLICKEY (written by epd-keygen)\n";
  for (const auto& [id, key] : listed) pub << id << ' ' << key << '\n';
  const auto tmp = dir / "cluster.pub.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << pub.str())) return bad(tmp, "cannot write");
  }
  std::filesystem::rename(tmp, pub_file, ec);
  if (ec) return bad(pub_file, "cannot write: " + ec.message());
  written.push_back(pub_file);
  return written;
}

}  // namespace epd::transport
