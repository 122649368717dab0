// GET / and GET /dashboard/<file>: the dashboard page and its script, style sheet and icon, served from the
// bytes compiled into the binary (dashboard_files.hpp). The page reads only this router's own JSON routes,
// so the Content-Security-Policy allows nothing but this origin (and data: images for the playground's
// preview of a chosen file).
#include "dashboard_route.hpp"

#include "dashboard_files.hpp"

namespace epd::http {
namespace {

constexpr std::string_view kPrefix = "/dashboard/";

constexpr const char* kPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string content_type(std::string_view name) {
  auto ends = [&](std::string_view ext) { return name.ends_with(ext); };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  return "application/octet-stream";
}

const EmbeddedFile* find_file(std::string_view path) {
  std::string_view name;
  if (path == "/")
    name = "index.html";
  else if (path.starts_with(kPrefix))
    name = path.substr(kPrefix.size());
  else
    return nullptr;
  for (const auto& f : dashboard_files())
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

bool is_dashboard_path(std::string_view path) {
  return find_file(path) != nullptr;
}

void handle_dashboard(Exchange& ex) {
  const EmbeddedFile* file = find_file(ex.request().path);
  if (!file) return ex.respond(404, "", "text/plain");  // not reached: the route table checked the path
  ex.respond(200, std::string(file->bytes), content_type(file->name),
             {{"Cache-Control", "no-cache"},
              {"Content-Security-Policy", kPolicy},
              {"X-Content-Type-Options", "nosniff"},
              {"Referrer-Policy", "no-referrer"}});
}

}  // namespace epd::http
