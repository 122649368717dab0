// GET /: the dashboard's page and files, compiled into the binary, with their types, no-cache and a
// same-origin Content-Security-Policy; nothing on the page comes from another origin.
#include <regex>
#include <set>

#include "test_server.hpp"

using namespace epd::http;
using namespace epd::http::test;

namespace {

void check_headers(const httplib::Result& res, const std::string& type) {
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == type);
  CHECK(res->get_header_value("Cache-Control") == "no-cache");
  CHECK(res->get_header_value("X-Content-Type-Options") == "nosniff");
  const std::string csp = res->get_header_value("Content-Security-Policy");
  INFO("CSP: " << csp);
  for (const char* directive : {"default-src 'none'", "script-src 'self'", "style-src 'self'",
                                "connect-src 'self'", "img-src 'self' data:", "frame-ancestors 'none'"})
    CHECK(csp.find(directive) != std::string::npos);
  CHECK(csp.find("unsafe") == std::string::npos);
}

// The /dashboard/... paths a page or style sheet refers to.
std::set<std::string> referenced_files(const std::string& text) {
  std::set<std::string> out;
  static const std::regex ref(R"((/dashboard/[A-Za-z0-9_.-]+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), ref); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1]);
  return out;
}

}  // namespace

TEST_CASE("GET / serves the dashboard page with its headers", "[http][dashboard]") {
  TestServer server;
  auto cli = server.client();
  auto res = cli.Get("/");
  check_headers(res, "text/html; charset=utf-8");
  CHECK(res->body.starts_with("<!doctype html>"));
  CHECK(res->body.find("<title>epd dashboard</title>") != std::string::npos);
  for (const char* id : {"id=\"instances\"", "id=\"chart-ttft\"", "id=\"failures\"", "id=\"answer\""})
    CHECK(res->body.find(id) != std::string::npos);
  // A query string does not change the page.
  CHECK(cli.Get("/?refresh=1")->body == res->body);

  // HEAD: the same head, no body.
  auto head = cli.Head("/");
  REQUIRE(head);
  CHECK(head->status == 200);
  CHECK(head->body.empty());
  CHECK(head->get_header_value("Content-Length") == std::to_string(res->body.size()));
  CHECK(head->get_header_value("Content-Type") == "text/html; charset=utf-8");

  // Only GET and HEAD.
  auto post = cli.Post("/", "{}", "application/json");
  REQUIRE(post);
  CHECK(post->status == 405);
  CHECK(post->get_header_value("Allow") == "GET, HEAD");
}

TEST_CASE("every file the page refers to is served with its type, and nothing else", "[http][dashboard]") {
  TestServer server;
  auto cli = server.client();
  const std::string page = cli.Get("/")->body;
  auto files = referenced_files(page);
  const auto css = cli.Get("/dashboard/dashboard.css");
  check_headers(css, "text/css; charset=utf-8");
  for (const auto& f : referenced_files(css->body)) files.insert(f);
  CHECK(files == std::set<std::string>{"/dashboard/dashboard.css", "/dashboard/dashboard.js",
                                       "/dashboard/favicon.svg", "/dashboard/sample-1.png",
                                       "/dashboard/sample-2.png", "/dashboard/sample-3.png"});
  check_headers(cli.Get("/dashboard/dashboard.js"), "text/javascript; charset=utf-8");
  check_headers(cli.Get("/dashboard/favicon.svg"), "image/svg+xml");
  for (const char* sample :
       {"/dashboard/sample-1.png", "/dashboard/sample-2.png", "/dashboard/sample-3.png"}) {
    const auto png = cli.Get(sample);
    check_headers(png, "image/png");
    CHECK(png->body.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));  // the file's bytes, binary intact
  }
  files.erase("/dashboard/sample-1.png");  // binary: the URL checks below are for text
  files.erase("/dashboard/sample-2.png");
  files.erase("/dashboard/sample-3.png");

  // No CDN, no external font or script: the only absolute URL is the SVG namespace.
  for (const auto& path : files) {
    const std::string body = cli.Get(path)->body;
    INFO(path);
    CHECK_FALSE(body.empty());
    static const std::regex url(R"(https?://[^\s'"`)]+)");
    for (auto it = std::sregex_iterator(body.begin(), body.end(), url); it != std::sregex_iterator(); ++it)
      CHECK(it->str() == "http://www.w3.org/2000/svg");
    CHECK(body.find("//cdn") == std::string::npos);
  }

  // Paths that are not files are 404, in the API's error shape.
  for (const char* missing :
       {"/dashboard/", "/dashboard/nope.js", "/dashboard/../http_api.cpp", "/dashboard"}) {
    INFO(missing);
    auto res = cli.Get(missing);
    REQUIRE(res);
    CHECK(res->status == 404);
    CHECK(res->get_header_value("Content-Type") == "application/json");
  }
}
