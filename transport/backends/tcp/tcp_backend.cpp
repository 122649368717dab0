// tcp backend: a Receiver serves my regions; TcpLinks write into peers'.
#include <memory>

#include "backend_factory.hpp"
#include "tcp_link.hpp"
#include "tcp_receiver.hpp"

namespace epd::transport {
namespace tcp {
namespace {

class TcpBackend final : public Backend {
 public:
  TcpBackend(const TcpConfig& config, std::unique_ptr<Receiver> receiver)
      : config_(config), receiver_(std::move(receiver)) {}

  BackendKind kind() const override { return BackendKind::tcp; }
  void describe(protocol::SegmentDescriptor& self) const override {
    self.tcp_endpoint = receiver_->endpoint();
  }
  bool can_reach(const protocol::SegmentDescriptor&, const protocol::SegmentDescriptor& peer) const override {
    return !peer.tcp_endpoint.empty();
  }
  Status on_region_added(Region& region) override {
    receiver_->add_region(region.addr(), region.length);
    return {};
  }
  Result<std::unique_ptr<Link>> connect(const protocol::SegmentDescriptor& peer) override {
    return TcpLink::open(peer, config_);
  }

 private:
  const TcpConfig config_;
  std::unique_ptr<Receiver> receiver_;
};

}  // namespace
}  // namespace tcp

Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendContext& ctx) {
  const tcp::Endpoint at{ctx.config.tcp.listen_host, ctx.config.tcp.listen_port};
  auto receiver = tcp::Receiver::start(at, ctx.token, ctx.config.instance_id, ctx.fences);
  if (!receiver) return receiver.error();
  return std::unique_ptr<Backend>(new tcp::TcpBackend(ctx.config.tcp, std::move(receiver).value()));
}

}  // namespace epd::transport
