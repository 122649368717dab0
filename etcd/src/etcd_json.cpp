#include "etcd_json.hpp"

#include <charconv>

#include "epd/http/base64.hpp"

namespace epd::etcd::detail {

using protocol::ErrorCode;
using protocol::make_error;

std::string b64(const std::string& bytes) {
  return epd::http::base64_encode({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

Result<std::string> unb64(const std::string& text) {
  auto raw = epd::http::base64_decode(text);
  if (!raw) return make_error(ErrorCode::malformed_body, "etcd answer: bad base64: " + raw.error().detail);
  return std::string(raw->begin(), raw->end());
}

Result<int64_t> int64_field(const nlohmann::json& object, const char* name) {
  if (!object.is_object()) return make_error(ErrorCode::malformed_body, "etcd answer: not an object");
  auto it = object.find(name);
  if (it == object.end()) return int64_t(0);
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const auto& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) return v;
  }
  return make_error(ErrorCode::bad_field_type, std::string("etcd answer: '") + name + "' is not an int64");
}

Result<KeyValue> parse_kv(const nlohmann::json& kv) {
  if (!kv.is_object()) return make_error(ErrorCode::malformed_body, "etcd answer: a kv is not an object");
  KeyValue out;
  auto key = unb64(kv.value("key", std::string()));
  if (!key) return key.error();
  out.key = std::move(*key);
  auto value = unb64(kv.value("value", std::string()));
  if (!value) return value.error();
  out.value = std::move(*value);
  protocol::FirstError e;
  e.take(out.create_revision, int64_field(kv, "create_revision"))
      .take(out.mod_revision, int64_field(kv, "mod_revision"))
      .take(out.lease, int64_field(kv, "lease"));
  if (!e.status()) return e.status().error();
  return out;
}

std::optional<std::string> etcd_error(const nlohmann::json& answer) {
  if (!answer.is_object()) return "etcd answer is not a JSON object";
  const nlohmann::json* err = nullptr;
  if (answer.contains("error")) err = &answer;  // unary: {"error": "...", "message": "...", "code": N}
  if (!err) return std::nullopt;
  std::string message = err->value("message", std::string());
  if (message.empty() && (*err)["error"].is_string()) message = (*err)["error"].get<std::string>();
  if (message.empty() && (*err)["error"].is_object())
    message = (*err)["error"].value("message", std::string());
  return "etcd: " + message + " (code " + std::to_string(grpc_code(answer)) + ")";
}

int grpc_code(const nlohmann::json& answer) {
  if (!answer.is_object()) return 0;
  if (auto it = answer.find("code"); it != answer.end() && it->is_number_integer()) return it->get<int>();
  if (auto it = answer.find("error"); it != answer.end() && it->is_object())
    if (auto c = it->find("grpc_code"); c != it->end() && c->is_number_integer()) return c->get<int>();
  return 0;
}

}  // namespace epd::etcd::detail
