#include "rdma_options.hpp"

namespace epd::transport::rdma {

Result<RdmaConfig> parse_rdma_options(const BackendOptions& o, const std::string& host) {
  RdmaConfig c;
  c.handshake_host = host;
  protocol::FirstError e;
  e.take(c.device, o.get_string("rdma_device", c.device))
      .take(c.qps_per_peer, o.get_uint("rdma_qps_per_peer", c.qps_per_peer, 1, 64))
      .take(c.slice_bytes, o.get_uint("rdma_slice_bytes", c.slice_bytes, 4096, 1ull << 30))
      .take(c.port, o.get_uint("rdma_port", c.port, 1, 255))
      .take(c.max_outstanding_wr, o.get_uint("rdma_max_outstanding_wr", c.max_outstanding_wr, 1, 1u << 16))
      .take(c.handshake_port, o.get_uint("rdma_handshake_port", c.handshake_port, 0, 65535))
      .take(c.op_timeout, o.get_ms("rdma_op_timeout_ms", c.op_timeout));
  if (o.has("rdma_gid_index")) e.take(c.gid_index, o.get_uint("rdma_gid_index", 0, 0, 255));  // else: auto
  if (!e.status()) return e.status().error();
  return c;
}

}  // namespace epd::transport::rdma
