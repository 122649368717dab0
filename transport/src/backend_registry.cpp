#include "epd/transport/backend_registry.hpp"

#include <algorithm>

#include "builtin_backends.hpp"

namespace epd::transport {

const std::vector<const BackendPlugin*>& backend_plugins() {
  static const std::vector<const BackendPlugin*> all = backends::builtin();
  return all;
}

const BackendPlugin* find_backend(std::string_view name) {
  for (const BackendPlugin* p : backend_plugins())
    if (p->name == name) return p;
  return nullptr;
}

std::vector<std::string> default_offer() {
  std::vector<std::string> out;
  for (const BackendPlugin* p : backend_plugins())
    if (!p->caps.needs_device) out.emplace_back(p->name);
  return out;
}

std::string backend_names_text() {
  const auto& all = backend_plugins();
  std::string out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) out += i + 1 == all.size() ? " or " : ", ";
    out += all[i]->name;
  }
  return out;
}

Status check_backend_options(const BackendOptions& options) {
  for (const auto& entry : options.values()) {
    const auto& key = entry.first;  // not a structured binding: clang 14 (fuzz/) cannot capture one
    const bool owned = std::any_of(backend_plugins().begin(), backend_plugins().end(), [&](const auto* p) {
      return std::find(p->option_keys.begin(), p->option_keys.end(), key) != p->option_keys.end();
    });
    if (!owned) return options.bad(key, "is not known here (typo?)");
  }
  for (const BackendPlugin* p : backend_plugins())
    if (p->check_options)
      if (auto st = p->check_options(options); !st) return st;
  return {};
}

const std::vector<uint8_t>* peer_info(const protocol::SegmentDescriptor& peer, std::string_view backend) {
  if (peer.backends_version != protocol::kBackendInfoVersion) return nullptr;
  auto it = peer.backends.find(std::string(backend));
  return it == peer.backends.end() ? nullptr : &it->second;
}

}  // namespace epd::transport
