#include "qp.hpp"

#include <cerrno>
#include <cstring>
#include <random>

namespace epd::transport::rdma {
namespace {

Error qp_error(const char* step, int rc) {
  return make_error(ErrorCode::transfer_failed, std::string("rdma qp ") + step + ": " + std::strerror(rc));
}

}  // namespace

Result<ibv_qp*> create_rc_qp(Device& dev, uint32_t max_send_wr) {
  ibv_qp_init_attr init{};
  init.send_cq = dev.cq();
  init.recv_cq = dev.cq();  // no receives are ever posted: WRITEs without immediate consume none
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = max_send_wr;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(dev.pd(), &init);
  if (!qp)
    return make_error(ErrorCode::transfer_failed, std::string("ibv_create_qp: ") + std::strerror(errno));
  return qp;
}

Status connect_qp(ibv_qp* qp, const Device& dev, uint32_t local_psn, const RemoteQp& remote) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = dev.port();
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return qp_error("INIT", rc);

  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = remote.mtu;
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;  // always a GRH: required on RoCE, harmless on IB
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.port_num = dev.port();
  std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
  a.ah_attr.grh.sgid_index = uint8_t(dev.gid_index());
  a.ah_attr.grh.hop_limit = 64;
  if (int rc = ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return qp_error("RTR", rc);

  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = local_psn;
  a.timeout = kAckTimeoutExp;
  a.retry_cnt = kRetryCount;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                 IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
    return qp_error("RTS", rc);
  return {};
}

void qp_to_error(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

uint32_t random_psn() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  return rng() & 0xffffff;
}

ibv_mtu min_mtu(ibv_mtu a, ibv_mtu b) {
  return a < b ? a : b;
}

Error map_wc_status(ibv_wc_status status, bool closing, const std::string& where) {
  const std::string detail = where + ": " + ibv_wc_status_str(status);
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return make_error(ErrorCode::peer_died, detail + " (peer unreachable or dead)");
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
      return make_error(ErrorCode::remote_access, detail + " (bad rkey or range at the target)");
    case IBV_WC_WR_FLUSH_ERR:
      return make_error(closing ? ErrorCode::session_closed : ErrorCode::transfer_failed, detail);
    case IBV_WC_RESP_TIMEOUT_ERR:
      return make_error(ErrorCode::timeout, detail);
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_MW_BIND_ERR: {
      // A local bug (bad lkey, length, QP state): the same request would fail again.
      Error e = make_error(ErrorCode::transfer_failed, detail + " (local)");
      e.retryable = false;
      return e;
    }
    default:  // REM_OP, REM_ABORT, BAD_RESP, FATAL, GENERAL, ...: a fresh connection may help
      return make_error(ErrorCode::transfer_failed, detail);
  }
}

}  // namespace epd::transport::rdma
