#pragma once
// RC queue pairs: creation, the RESET -> INIT -> RTR -> RTS transitions, and the mapping of work-completion
// statuses to epd errors (docs/transport.md, "RDMA error mapping").
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "device.hpp"
#include "epd/transport/types.hpp"

namespace epd::transport::rdma {

// Where the remote QP is: its number, starting PSN and address (GID, LID), plus the path MTU both can use.
struct RemoteQp {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  Gid gid{};
  uint16_t lid = 0;
  ibv_mtu mtu = IBV_MTU_1024;
};

// Retry policy of requester QPs: ~67 ms ACK timeout x 7 retries, so a dead peer shows up as
// IBV_WC_RETRY_EXC_ERR within about a second instead of hanging.
inline constexpr uint8_t kAckTimeoutExp = 14;  // 4.096 us * 2^14
inline constexpr uint8_t kRetryCount = 7;

Result<ibv_qp*> create_rc_qp(Device& dev, uint32_t max_send_wr);
// RESET -> INIT (remote write allowed: the same QP type serves as responder) -> RTR -> RTS.
Status connect_qp(ibv_qp* qp, const Device& dev, uint32_t local_psn, const RemoteQp& remote);
// Moves a QP to ERR so its outstanding WRs flush; errors are ignored (the QP is being dropped anyway).
void qp_to_error(ibv_qp* qp);
uint32_t random_psn();
ibv_mtu min_mtu(ibv_mtu a, ibv_mtu b);

// Error for a failed work completion. `closing`: the link is being closed, so flushes are expected.
Error map_wc_status(ibv_wc_status status, bool closing, const std::string& where);

}  // namespace epd::transport::rdma
