#pragma once
// CURVE key pairs of the control plane, as files. A key file (`<id>.key`, mode 0600) holds one instance's
// pair in Z85, as TOML-compatible lines:  public = "..."  /  secret = "..." . The authorized keys file
// (`cluster.pub`, readable) lists every instance of a cluster: one `ID PUBLICKEY` per line, `#` comments.
// Secrets live in files only; nothing here logs a secret.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "epd/transport/types.hpp"

namespace epd::transport {

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// A fresh pair from libzmq (libsodium underneath).
Result<CurveKeyPair> generate_curve_key_pair();
// True for 40 characters of the Z85 alphabet that decode to 32 bytes.
bool valid_curve_key(const std::string& z85);

// Reads a key file. config_error naming the file when it is unreadable, malformed, or readable by group or
// others (a secret shared with the host's other users is no secret).
Result<CurveKeyPair> read_curve_key_file(const std::filesystem::path& file);
// Reads an authorized keys file: (id, public key) in file order. config_error naming the file and line.
Result<std::vector<std::pair<std::string, std::string>>> read_authorized_keys(
    const std::filesystem::path& file);

// epd-keygen: writes `dir/<id>.key` (0600) for every id and adds them to `dir/cluster.pub` (kept sorted by
// id; entries of other ids stay). An existing key file is an error unless `force`. Returns the files
// written.
Result<std::vector<std::filesystem::path>> write_cluster_keys(const std::filesystem::path& dir,
                                                              const std::vector<std::string>& ids,
                                                              bool force);

}  // namespace epd::transport
