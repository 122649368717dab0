#include "llama_cpp_oracle.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

namespace epd::model::test {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<TokenId> token_ids(const Tokenizer& t, const std::string& text, bool parse_special) {
  auto r = t.encode(text, parse_special);
  REQUIRE(r.ok());
  return *r;
}

json llama_cpp_tokens(const fs::path& gguf, const fs::path& dir, const std::vector<std::string>& strings,
                      bool vocab_only) {
  const std::string node_dir = std::string(EPD_SOURCE_DIR) + "/tests/http/node";
  if (!fs::exists(node_dir + "/node_modules/node-llama-cpp"))
    FAIL("node-llama-cpp is not installed in " + node_dir + " (scripts/setup-deps runs npm ci there)");
  std::ofstream(dir / "strings.json") << json{{"strings", strings}}.dump();
  const fs::path out = dir / "tokens.json", err = dir / "node.err";
  const std::string cmd = "timeout 120 node " + node_dir + "/tokenize.mjs --model " + gguf.string() +
                          " --input " + (dir / "strings.json").string() + " --output " + out.string() +
                          (vocab_only ? " --vocab-only" : "") + " >" + err.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) FAIL("tokenize.mjs failed (" + std::to_string(rc) + "): " + read_all(err));
  json r = json::parse(read_all(out));
  REQUIRE(r.at("results").size() == strings.size());
  return r;
}

std::string clean_spaces(const std::string& in) {
  std::string a;
  for (size_t i = 0; i < in.size(); ++i) {
    const char x = in[i];
    if (i > 0 && in[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a.push_back(x);
  }
  std::string b;
  for (size_t i = 0; i < a.size(); ++i) {
    if (i > 0 && a[i] == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b.push_back('\'');
      ++i;  // the space after it goes too
      continue;
    }
    b.push_back(a[i]);
  }
  std::string c;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i > 0 && b[i - 1] == ' ' && b[i] == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1], x2 = i + 2 < b.size() ? b[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) c.pop_back();
    }
    c.push_back(b[i]);
  }
  return c;
}

}  // namespace epd::model::test
