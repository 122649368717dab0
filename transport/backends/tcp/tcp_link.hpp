#pragma once
// The sending side of the tcp backend: `lanes` connections to one peer's listener. Ops are cut into slices of
// at most slice_bytes, spread round-robin over the lanes. A submit writes a small slice to an idle lane
// itself (one non-blocking sendmsg); everything else goes to the lane's sender thread (one sendmsg for many
// header+payload pairs, payload straight from the source region). Each lane's reader thread acks complete
// slices and enforces op_timeout. A lost connection or a stall fails every outstanding batch, retryable.
#include <memory>

#include "epd/transport/backend.hpp"
#include "tcp_options.hpp"

namespace epd::transport::tcp {

struct LinkState;

class TcpLink final : public Link {
 public:
  // Connects to `endpoint` (the peer's TcpInfo::endpoint).
  static Result<std::unique_ptr<Link>> open(const protocol::SegmentDescriptor& peer,
                                            const std::string& endpoint, const TcpConfig& config);
  ~TcpLink() override;

  void submit(const BatchPtr& batch, std::span<const ResolvedOp> ops) override;
  void close() override;
  bool healthy() const override;

 private:
  explicit TcpLink(std::shared_ptr<LinkState> state) : state_(std::move(state)) {}
  std::shared_ptr<LinkState> state_;
};

}  // namespace epd::transport::tcp
