#include "epd/actors/kernel/role_settings.hpp"

namespace epd::actors::kernel {

SettingsSchema<SupervisorConfig> transfer_settings() {
  SettingsSchema<TransferWorkerConfig> worker;
  worker.ms("slow_transfer_ms", &TransferWorkerConfig::slow_threshold)
      .u32("session_failure_window", &TransferWorkerConfig::failure_window, 1, 100000)
      .u32("session_failure_pct", &TransferWorkerConfig::failure_threshold_pct, 0, 100);
  SettingsSchema<SupervisorConfig> s;
  s.u32("worker_max_restarts", &SupervisorConfig::max_restarts, 0, 100000)
      .ms("worker_restart_window_ms", &SupervisorConfig::window)
      .part(&SupervisorConfig::worker, worker)
      .add({}, [](const RoleContext&, const config::Settings&, SupervisorConfig& out) {
        out.window = std::max(out.window, std::chrono::milliseconds(1));  // 0 ms would make the budget unlimited
        return protocol::Status{};
      });
  return s;
}

}  // namespace epd::actors::kernel
