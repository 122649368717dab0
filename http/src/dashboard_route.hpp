#pragma once
// The dashboard at GET / (http/dashboard/, docs/http-api.md "Dashboard"): static files compiled in.
#include <string_view>

#include "epd/http/http_server.hpp"

namespace epd::http {

// "/" or "/dashboard/<one of the compiled-in files>".
bool is_dashboard_path(std::string_view path);
// Answers a GET or HEAD of such a path with the file, its Content-Type, no-cache and a same-origin CSP.
void handle_dashboard(Exchange& ex);

}  // namespace epd::http
