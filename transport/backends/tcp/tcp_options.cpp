#include "tcp_options.hpp"

namespace epd::transport::tcp {

#define EPD_TCP_TRY(lhs, expr)   \
  do {                           \
    auto r_ = (expr);            \
    if (!r_) return r_.error();  \
    lhs = std::move(r_.value()); \
  } while (0)

Result<TcpConfig> parse_tcp_options(const BackendOptions& o, const std::string& host) {
  TcpConfig c;
  c.listen_host = host;
  uint64_t v = 0;
  EPD_TCP_TRY(v, o.get_uint("tcp_port", c.listen_port, 0, 65535));
  c.listen_port = uint16_t(v);
  EPD_TCP_TRY(v, o.get_uint("tcp_lanes", c.lanes, 1, 64));
  c.lanes = uint32_t(v);
  EPD_TCP_TRY(c.slice_bytes, o.get_uint("tcp_slice_bytes", c.slice_bytes, 4096, 1ull << 30));
  EPD_TCP_TRY(v, o.get_uint("tcp_max_inflight_slices", c.max_inflight_slices, 1, 1u << 16));
  c.max_inflight_slices = uint32_t(v);
  EPD_TCP_TRY(c.op_timeout, o.get_ms("tcp_op_timeout_ms", c.op_timeout));
  EPD_TCP_TRY(c.connect_timeout, o.get_ms("connect_timeout_ms", c.connect_timeout));
  return c;
}

}  // namespace epd::transport::tcp
