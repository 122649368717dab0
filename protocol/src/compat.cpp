#include "epd/protocol/compat.hpp"

#include <algorithm>

namespace epd::protocol {

const char* kind_name(Incompatibility::Kind kind) {
  return kind == Incompatibility::Kind::protocol ? "protocol" : "model";
}

std::string describe_protocol(const BuildIdentity& id) {
  if (id.protocol == 0) return "no protocol revision (a build before revision 4)";
  std::string out = id.protocol_oldest == id.protocol ? "revision " + std::to_string(id.protocol)
                                                      : "revisions " + std::to_string(id.protocol_oldest) +
                                                            ".." + std::to_string(id.protocol);
  if (!id.build.empty()) out += " (build " + id.build + ")";
  return out;
}

std::string describe_model(const BuildIdentity& id) {
  if (id.model_digest.empty()) return "an unnamed model";
  return "'" + id.model_name + "' (sha256 " + id.model_digest.substr(0, 12) + ")";
}

BuildIdentity current_protocol_identity() {
  BuildIdentity id;
  id.protocol = kProtocolRevision;
  id.protocol_oldest = kOldestProtocolRevision;
  return id;
}

std::optional<Incompatibility> incompatibility(const std::string& our_name, const BuildIdentity& ours,
                                               const std::string& their_name, const BuildIdentity& theirs) {
  // A range with oldest > newest is nonsense; read it as the single newest revision.
  const auto range = [](const BuildIdentity& id) {
    return std::pair{std::min(id.protocol_oldest == 0 ? id.protocol : id.protocol_oldest, id.protocol),
                     id.protocol};
  };
  const auto [our_lo, our_hi] = range(ours);
  const auto [their_lo, their_hi] = range(theirs);
  if (theirs.protocol == 0 || ours.protocol == 0 || std::max(our_lo, their_lo) > std::min(our_hi, their_hi))
    return Incompatibility{Incompatibility::Kind::protocol,
                           "'" + their_name + "' speaks " + describe_protocol(theirs) + ", '" + our_name +
                               "' " + describe_protocol(ours) + ": no protocol revision in common"};
  if (theirs.model_digest != ours.model_digest)
    return Incompatibility{Incompatibility::Kind::model,
                           "'" + their_name + "' serves " + describe_model(theirs) + ", '" + our_name + "' " +
                               describe_model(ours) + ": not the same model"};
  return std::nullopt;
}

}  // namespace epd::protocol
