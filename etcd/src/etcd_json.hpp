#pragma once
// The gateway's JSON: request bodies, and answers parsed into plain structs. proto3's JSON mapping sends
// 64-bit integers as strings, leaves out fields at their default (a PUT event has no "type", a count of
// 0 no "count"), and carries keys and values as base64.
#include <nlohmann/json.hpp>
#include <string>

#include "epd/etcd/etcd_client.hpp"

namespace epd::etcd::detail {

std::string b64(const std::string& bytes);
// Decoded base64 (etcd's own output: padded, standard alphabet); an error for anything else.
Result<std::string> unb64(const std::string& text);
// A proto3 int64 field: a string of digits, a number, or absent (0).
Result<int64_t> int64_field(const nlohmann::json& object, const char* name);

Result<KeyValue> parse_kv(const nlohmann::json& kv);
// The etcd error object of an answer, if it is one: "etcd: MESSAGE (code N)".
std::optional<std::string> etcd_error(const nlohmann::json& answer);
// The gRPC status code of an error answer (14 unavailable: try another member), 0 when absent.
int grpc_code(const nlohmann::json& answer);

}  // namespace epd::etcd::detail
