#include "rdma_options.hpp"

namespace epd::transport::rdma {

#define EPD_RDMA_TRY(lhs, expr)  \
  do {                           \
    auto r_ = (expr);            \
    if (!r_) return r_.error();  \
    lhs = std::move(r_.value()); \
  } while (0)

Result<RdmaConfig> parse_rdma_options(const BackendOptions& o, const std::string& host) {
  RdmaConfig c;
  c.handshake_host = host;
  uint64_t v = 0;
  EPD_RDMA_TRY(c.device, o.get_string("rdma_device", c.device));
  EPD_RDMA_TRY(v, o.get_uint("rdma_gid_index", 0, 0, 255));
  if (o.has("rdma_gid_index")) c.gid_index = int(v);
  EPD_RDMA_TRY(v, o.get_uint("rdma_qps_per_peer", c.qps_per_peer, 1, 64));
  c.qps_per_peer = uint32_t(v);
  EPD_RDMA_TRY(c.slice_bytes, o.get_uint("rdma_slice_bytes", c.slice_bytes, 4096, 1ull << 30));
  EPD_RDMA_TRY(v, o.get_uint("rdma_port", c.port, 1, 255));
  c.port = uint8_t(v);
  EPD_RDMA_TRY(v, o.get_uint("rdma_max_outstanding_wr", c.max_outstanding_wr, 1, 1u << 16));
  c.max_outstanding_wr = uint32_t(v);
  EPD_RDMA_TRY(v, o.get_uint("rdma_handshake_port", c.handshake_port, 0, 65535));
  c.handshake_port = uint16_t(v);
  EPD_RDMA_TRY(c.op_timeout, o.get_ms("rdma_op_timeout_ms", c.op_timeout));
  return c;
}

}  // namespace epd::transport::rdma
