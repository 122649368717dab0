// The rdma backend's registration. Compiled in every build (so `backend = "rdma"` and the rdma_* keys parse
// the same everywhere); it can start only when the build found ibverbs (EPD_HAVE_RDMA).
#include <string>

#include "epd/transport/backend_info.hpp"
#include "rdma_info.hpp"
#include "rdma_options.hpp"

namespace epd::transport {
#ifdef EPD_HAVE_RDMA
namespace rdma {
// rdma_backend.cpp. Fails (and the engine drops rdma with a log line) when no device is usable.
Result<std::unique_ptr<Backend>> make_backend(const BackendContext& ctx);
}  // namespace rdma
#endif

namespace {

Status check_rdma_options(const BackendOptions& options) {
  if (auto c = rdma::parse_rdma_options(options, ""); !c) return c.error();
  return {};
}

// Soft-RoCE (rxe) and soft-iWARP (siw) are the kernel emulating a NIC: figures prove the path, not speed.
std::string rdma_emulation_note(const protocol::SegmentDescriptor& peer) {
  const auto info = decode_info<rdma::RdmaInfo>(peer, rdma::kName);
  if (!info || (info->device.rfind("rxe", 0) != 0 && info->device.rfind("siw", 0) != 0)) return {};
  return "device " + info->device + " is software RDMA (Soft-RoCE/siw), not a NIC";
}

}  // namespace

namespace backends {
const BackendPlugin& rdma_plugin() {
  static const BackendPlugin plugin{
      .name = rdma::kName,
      .summary = "hosts with RDMA devices: one-sided RDMA WRITEs over RC queue pairs (ibverbs)",
      .caps = {.needs_device = true, .fences_grants = true},
      .preference = 20,
      .option_keys = {"rdma_device", "rdma_gid_index", "rdma_qps_per_peer", "rdma_slice_bytes", "rdma_port",
                      "rdma_max_outstanding_wr", "rdma_handshake_port", "rdma_op_timeout_ms"},
      .check_options = &check_rdma_options,
#ifdef EPD_HAVE_RDMA
      .make = &rdma::make_backend,
#else
      .make = nullptr,
#endif
      .peer_gone = nullptr,
      .emulation_note = &rdma_emulation_note,
  };
  return plugin;
}
}  // namespace backends

}  // namespace epd::transport
