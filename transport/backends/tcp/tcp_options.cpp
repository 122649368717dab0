#include "tcp_options.hpp"

namespace epd::transport::tcp {

Result<TcpConfig> parse_tcp_options(const BackendOptions& o, const std::string& host) {
  TcpConfig c;
  c.listen_host = host;
  protocol::FirstError e;
  e.take(c.listen_port, o.get_uint("tcp_port", c.listen_port, 0, 65535))
      .take(c.lanes, o.get_uint("tcp_lanes", c.lanes, 1, 64))
      .take(c.slice_bytes, o.get_uint("tcp_slice_bytes", c.slice_bytes, 4096, 1ull << 30))
      .take(c.max_inflight_slices, o.get_uint("tcp_max_inflight_slices", c.max_inflight_slices, 1, 1u << 16))
      .take(c.op_timeout, o.get_ms("tcp_op_timeout_ms", c.op_timeout))
      .take(c.connect_timeout, o.get_ms("connect_timeout_ms", c.connect_timeout));
  if (!e.status()) return e.status().error();
  return c;
}

}  // namespace epd::transport::tcp
