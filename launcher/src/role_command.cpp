#include "epd/launcher/role_command.hpp"

#include <unistd.h>

namespace epd::launcher {
namespace {

bool is_executable_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

protocol::Result<std::vector<std::string>> role_command(const std::filesystem::path& bin_dir,
                                                        std::string_view role,
                                                        const std::filesystem::path& config_file,
                                                        std::string_view id) {
  auto own = bin_dir / ("epd-" + std::string(role));
  if (is_executable_file(own))
    return std::vector<std::string>{own.string(), "--config", config_file.string(), "--id", std::string(id)};
  auto generic = bin_dir / "epd-role";
  if (is_executable_file(generic))
    return std::vector<std::string>{generic.string(),     "--role", std::string(role), "--config",
                                    config_file.string(), "--id",   std::string(id)};
  return protocol::make_error(protocol::ErrorCode::config_error,
                              "instance '" + std::string(id) + "' (role " + std::string(role) +
                                  "): no executable: neither " + own.string() + " nor " + generic.string() +
                                  " exists (or is executable); see --bin-dir");
}

}  // namespace epd::launcher
