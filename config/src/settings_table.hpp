#pragma once
#include <toml++/toml.h>

#include "epd/config/settings.hpp"

namespace epd::config {
struct SettingsTable {
  toml::table table;
};
}  // namespace epd::config
