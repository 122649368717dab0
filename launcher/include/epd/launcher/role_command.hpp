#pragma once
// The command line that runs one instance: <bin_dir>/epd-<role> --config FILE --id ID, or, for a role
// without its own executable, the generic runner <bin_dir>/epd-role --role ROLE --config FILE --id ID.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::launcher {

// config_error naming both paths when neither is an executable file.
protocol::Result<std::vector<std::string>> role_command(const std::filesystem::path& bin_dir,
                                                        std::string_view role,
                                                        const std::filesystem::path& config_file,
                                                        std::string_view id);

}  // namespace epd::launcher
