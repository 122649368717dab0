#pragma once
// The dashboard's static files (http/dashboard/), compiled into the binary by http/cmake/embed_files.cmake.
#include <span>
#include <string_view>

namespace epd::http {

struct EmbeddedFile {
  std::string_view name;  // "index.html", "dashboard.js", ...
  std::string_view bytes;
};

std::span<const EmbeddedFile> dashboard_files();

}  // namespace epd::http
