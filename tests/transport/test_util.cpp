#include "test_util.hpp"

#include <cstring>
#include <sstream>

namespace epd::test {
namespace {
// Built by append: GCC 12 warns falsely (-Wrestrict) on "r" + std::to_string(i) at -O3.
std::string fmt_region_name(int i) {
  std::string name = "r";
  name += std::to_string(i);
  return name;
}
}  // namespace

LocalTarget::LocalTarget(const std::string& offer, int regions, uint64_t bytes, EngineConfig config) {
  config.instance_id = "target";
  config.offer.clear();
  std::stringstream in(offer);
  for (std::string name; std::getline(in, name, ',');) config.offer.push_back(name);
  auto e = Engine::create(config);
  if (!e) return;
  for (int i = 0; i < regions; ++i)
    if (!(*e)->allocate(fmt_region_name(i), bytes)) return;
  engine_ = std::move(e).value();
  desc_ = engine_->descriptor();
}

bool LocalTarget::fill(uint64_t addr, uint64_t len, uint8_t byte) {
  if (!engine_->find_local(addr, len)) return false;
  std::memset(reinterpret_cast<void*>(addr), byte, len);
  return true;
}

std::unique_ptr<Target> make_target(bool child, const std::string& offer, int regions, uint64_t bytes) {
  if (child) return std::make_unique<ChildTarget>(offer, regions, bytes);
  return std::make_unique<LocalTarget>(offer, regions, bytes);
}

Initiator make_initiator(const std::string& backend, uint64_t src_bytes, EngineConfig config) {
  config.instance_id = "initiator";
  config.offer.clear();
  config.force = backend;
  Initiator out;
  auto e = Engine::create(config);
  if (!e) return out;
  auto r = (*e)->allocate("src", src_bytes);
  if (!r) return out;
  out.src = *r;
  out.engine = std::move(e).value();
  return out;
}

namespace {
std::vector<std::string> registered(bool device) {
  std::vector<std::string> out;
  for (const BackendPlugin* p : backend_plugins())
    if (p->caps.needs_device == device && p->make) out.emplace_back(p->name);  // built in
  return out;
}
}  // namespace

std::vector<std::string> host_backends() {
  return registered(false);
}
std::vector<std::string> device_backends() {
  return registered(true);
}

void fill_random(uint8_t* p, uint64_t len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < len; ++i) p[i] = static_cast<uint8_t>(rng());
}

}  // namespace epd::test
