// tcp backend: a Receiver serves my regions; TcpLinks write into peers'.
#include <memory>

#include "epd/transport/backend_info.hpp"
#include "tcp_info.hpp"
#include "tcp_link.hpp"
#include "tcp_options.hpp"
#include "tcp_receiver.hpp"

namespace epd::transport {
namespace tcp {
namespace {

class TcpBackend final : public Backend {
 public:
  TcpBackend(const TcpConfig& config, std::unique_ptr<Receiver> receiver)
      : config_(config), receiver_(std::move(receiver)) {}

  std::vector<uint8_t> connection_info(std::span<const Region* const>) const override {
    return encode_info(TcpInfo{receiver_->endpoint()});
  }
  bool can_reach(const protocol::SegmentDescriptor&, const protocol::SegmentDescriptor& peer) const override {
    const auto info = decode_info<TcpInfo>(peer, kName);
    return info && !info->endpoint.empty();
  }
  Status on_region_added(Region& region) override {
    receiver_->add_region(region.addr(), region.length);
    return {};
  }
  Result<std::unique_ptr<Link>> connect(const protocol::SegmentDescriptor& peer) override {
    const auto info = decode_info<TcpInfo>(peer, kName);
    if (!info) return make_error(ErrorCode::no_common_backend, peer.instance_id + " offers no tcp");
    return TcpLink::open(peer, info->endpoint, config_);
  }
  void set_token(uint64_t token) override { receiver_->set_token(token); }

 private:
  const TcpConfig config_;
  std::unique_ptr<Receiver> receiver_;
};

}  // namespace
}  // namespace tcp

namespace {

Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendContext& ctx) {
  auto config = tcp::parse_tcp_options(ctx.config.options, ctx.config.host);
  if (!config) return config.error();
  const tcp::Endpoint at{config->listen_host, config->listen_port};
  auto receiver = tcp::Receiver::start(at, ctx.token, ctx.config.instance_id, ctx.fences);
  if (!receiver) return receiver.error();
  return std::unique_ptr<Backend>(new tcp::TcpBackend(*config, std::move(receiver).value()));
}

Status check_tcp_options(const BackendOptions& options) {
  if (auto c = tcp::parse_tcp_options(options, ""); !c) return c.error();
  return {};
}

}  // namespace

namespace backends {
const BackendPlugin& tcp_plugin() {
  static const BackendPlugin plugin{
      .name = tcp::kName,
      .summary = "any host: lanes of TCP connections; the receiver places and acknowledges every frame",
      .caps = {.fences_writes = true},
      .preference = 30,
      .option_keys = {"tcp_port", "tcp_lanes", "tcp_slice_bytes", "tcp_max_inflight_slices",
                      "tcp_op_timeout_ms", "connect_timeout_ms"},
      .check_options = &check_tcp_options,
      .make = &make_tcp_backend,
  };
  return plugin;
}
}  // namespace backends

}  // namespace epd::transport
