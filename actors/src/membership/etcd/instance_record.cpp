#include "instance_record.hpp"

namespace epd::actors::etcd_backend {

using protocol::ErrorCode;
using protocol::make_error;

std::string instances_prefix(const std::string& cluster_prefix) {
  return cluster_prefix + "instances/";
}

std::string instance_key(const std::string& cluster_prefix, const std::string& id) {
  return instances_prefix(cluster_prefix) + id;
}

std::optional<std::string> id_of_key(const std::string& cluster_prefix, const std::string& key) {
  const std::string prefix = instances_prefix(cluster_prefix);
  if (key.size() <= prefix.size() || key.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::string id = key.substr(prefix.size());
  if (!protocol::valid_instance_id(id)) return std::nullopt;
  return id;
}

std::string encode_record(const protocol::PeerInfo& info) {
  auto bytes = protocol::encode_value(info);
  return std::string(bytes.begin(), bytes.end());
}

protocol::Result<protocol::PeerInfo> decode_record(const std::string& id, const std::string& bytes) {
  auto info = protocol::decode_value<protocol::PeerInfo>(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  if (!info) return make_error(info.error().code, "record of '" + id + "': " + info.error().detail);
  if (info->instance_id != id)
    return make_error(ErrorCode::invalid_request,
                      "record under '" + id + "' names instance '" + info->instance_id + "'");
  if (info->control_endpoint.empty() || info->role.empty() || info->incarnation == 0)
    return make_error(ErrorCode::missing_field,
                      "record of '" + id + "' has no endpoint, role or incarnation");
  return info;
}

}  // namespace epd::actors::etcd_backend
