#pragma once
// What an instance keeps in etcd, and where: `<prefix>instances/<id>` holds its descriptor (id, role,
// control endpoint, incarnation, segment descriptor, KV layout) as a msgpack PeerInfo,
// decoded with the control plane's limits like any frame from the network. Load is not in it: it changes
// every heartbeat and goes in-band to the routers.
#include <optional>
#include <string>

#include "epd/protocol/codec.hpp"
#include "epd/protocol/messages.hpp"

namespace epd::actors::etcd_backend {

std::string instances_prefix(const std::string& cluster_prefix);
std::string instance_key(const std::string& cluster_prefix, const std::string& id);
// The instance id of a key under instances_prefix(); nullopt for anything else.
std::optional<std::string> id_of_key(const std::string& cluster_prefix, const std::string& key);

// The descriptor as msgpack (PeerInfo carries no load).
std::string encode_record(const protocol::PeerInfo& info);
// Refuses what fails the codec, a record whose id is not its key's, and a record without an endpoint.
protocol::Result<protocol::PeerInfo> decode_record(const std::string& id, const std::string& bytes);

}  // namespace epd::actors::etcd_backend
