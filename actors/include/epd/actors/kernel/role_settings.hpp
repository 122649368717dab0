#pragma once
// Settings groups several roles share, declared once.
#include "epd/actors/kernel/settings_schema.hpp"
#include "epd/actors/role_context.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/actors/transfer_supervisor.hpp"

namespace epd::actors::kernel {

// The transfer workers' restart budget and session health (docs/failure-handling.md).
SettingsSchema<SupervisorConfig> transfer_settings();

// kv_page_size, kv_dtype, kv_order: the KV pool layout prefill and decode share (docs/staging.md), for
// `pages` pages (read before) of the role's model; kv_memory_mb sizes the pool instead and sets `pages`.
template <class S>
SettingsSchema<S>& kv_layout_settings(SettingsSchema<S>& schema, protocol::KvLayout S::*layout,
                                      uint32_t S::*pages) {
  return schema.add({std::begin(kKvLayoutSettingKeys), std::end(kKvLayoutSettingKeys)},
                    [layout, pages](const RoleContext& ctx, const config::Settings& s, S& out) {
                      auto l = kv_layout_setting(s, ctx.model, out.*pages);
                      if (!l) return protocol::Status(l.error());
                      out.*layout = *l;
                      out.*pages = l->num_pages;  // kv_memory_mb may have sized it
                      return protocol::Status{};
                    });
}

}  // namespace epd::actors::kernel
