#include "http_reply.hpp"

#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "epd/http/openai_reply.hpp"

namespace epd::http {
namespace {

using nlohmann::json;

// Never throws on bad UTF-8: replies must always be writable.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Renders a struct that lists its keys with `fields(s, v)` (protocol/messages.hpp) as a JSON object with the
// same keys: absent optionals are left out, nested structs become objects. So the JSON of a load report or
// of staging figures follows the struct without a hand-written list.
class FieldsJson {
 public:
  template <class T>
  static json render(const T& s) {
    FieldsJson v;
    T::fields(s, v);
    return std::move(v.out_);
  }
  template <class T>
  void req(std::string_view key, const T& value) {
    out_[std::string(key)] = value_of(value);
  }
  template <class T>
  void opt(std::string_view key, const T& value) {
    if constexpr (requires { value.has_value(); }) {
      if (!value) return;
      out_[std::string(key)] = value_of(*value);
    } else {
      req(key, value);
    }
  }

 private:
  template <class T>
  static json value_of(const T& v) {
    if constexpr (requires { T::fields(v, std::declval<FieldsJson&>()); })
      return render(v);
    else
      return json(v);
  }

  json out_ = json::object();
};

}  // namespace

std::string generate_reply_json(const GenerateResponse& r, bool logprobs) {
  const auto& t = r.timings;
  json j = {
      {"text", r.text},
      {"tokens", r.tokens},
      {"room", r.room},
      {"attempts", r.attempts},
      {"instances", {{"encoder", r.encoder}, {"prefill", r.prefill}, {"decode", r.decode}}},
      {"timings_ms",
       {{"encode", t.encode_ms},
        {"prefill", t.prefill_ms},
        {"kv_transfer", t.transfer_ms},
        {"first_token", t.first_token_ms},
        {"decode", t.decode_ms},
        {"total", t.total_ms}}},
  };
  if (logprobs) {
    json per_token = json::array();
    for (size_t i = 0; i < r.tokens.size() && i < r.logprobs.size(); ++i) {
      json top = json::array();
      for (const auto& alt : r.logprobs[i].top) top.push_back({{"token", alt.id}, {"logprob", alt.logprob}});
      per_token.push_back(
          {{"token", r.tokens[i]}, {"logprob", r.logprobs[i].logprob}, {"top", std::move(top)}});
    }
    j["logprobs"] = std::move(per_token);
  }
  return dump(j);
}

std::string instances_json(const std::vector<InstanceView>& instances) {
  json arr = json::array();
  for (const auto& i : instances) {
    json item = FieldsJson::render(i.load);
    item["id"] = i.id;
    item["role"] = i.role;
    item["control_endpoint"] = i.control_endpoint;
    item["incarnation"] = i.incarnation;
    item["last_seen_ms"] = i.last_seen_ms;
    item["build"] = i.identity.build;
    item["protocol"] = i.identity.protocol;
    item["protocol_oldest"] = i.identity.protocol_oldest;
    item["model"] = i.identity.model_name;
    item["model_digest"] = i.identity.model_digest;
    arr.push_back(std::move(item));
  }
  return dump(arr);
}

std::string stats_json(const RouterStats& s) {
  return dump({{"requests", s.requests},
               {"completed", s.completed},
               {"failed", s.failed},
               {"retries", s.retries},
               {"resumed", s.resumed},
               {"resumed_tokens", s.resumed_tokens},
               {"cancelled", s.cancelled},
               {"rejected", s.rejected},
               {"in_flight", s.in_flight},
               {"queued", s.queued},
               {"prompt_backlog_tokens", s.prompt_backlog_tokens},
               {"prompt_tokens_per_s", s.prompt_tokens_per_s ? json(*s.prompt_tokens_per_s) : json(nullptr)},
               {"retry_causes", json(s.retry_causes)},
               {"failure_causes", json(s.failure_causes)},
               {"tables", json(s.tables)}});
}

std::string models_json(const std::string& model_id) {
  return dump(
      {{"object", "list"},
       {"data",
        json::array({{{"id", model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "epd"}}})}});
}

}  // namespace epd::http
