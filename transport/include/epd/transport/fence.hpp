#pragma once
// Write fences: how a receiver keeps a stale writer out of memory it has reused.
//
// A region allocated with a fence unit (e.g. one KV page) accepts a write only under a key the receiver
// granted for every unit the write touches. The receiver grants a key per room before it hands the room's
// units to a writer and revokes it before it hands them to anybody else, so a writer that froze and woke up
// late presents a dead key and is refused. Backends that receive on the receiver's CPU (tcp) enforce it per
// write; rdma enforces it with the device: a key's units are reachable only through memory registrations
// made for that key, deregistered when it is revoked (Backend::revoke_grant). A backend whose writer maps
// the memory (shm) cannot, and Engine::fences_writes_from() says so.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <vector>

namespace epd::transport {

struct FenceStats {
  uint64_t grants = 0;        // keys live now
  uint64_t refused = 0;       // writes refused because their key did not own the units they touch
  uint64_t revoked_busy = 0;  // revocations that had to wait for a write still landing
};

class FenceTable {
 public:
  // Fences [base, base + length) in units of `unit_bytes`.
  void add_region(uint64_t base, uint64_t length, uint64_t unit_bytes);
  // Gives `units` of the fenced region at `base` to `key` (0: a fresh key) and returns the key; units past
  // the region's end are ignored; 0 if no region is fenced at `base`. A unit granted to another key before
  // is taken from it; such keys are appended to `displaced` (a backend must cut them off those units).
  uint64_t grant(uint64_t base, std::span<const uint64_t> units, uint64_t key = 0,
                 std::vector<uint64_t>* displaced = nullptr);
  // No write under `key` is accepted from now on. True when none is still landing: the units may be
  // reused now; false: ask again (a frame under the key is being received).
  bool revoke(uint64_t key);

  // Receiver side. unfenced: [addr, addr+len) is in no fenced region; admitted: every unit it touches is
  // owned by `key` (call landed(key) once the payload is in place); refused: counted, nothing may be written.
  enum class Admission { unfenced, admitted, refused };
  Admission admit(uint64_t key, uint64_t addr, uint64_t len);
  void landed(uint64_t key);
  // The byte ranges [addr, addr+len) a live key owns, adjacent units merged, by address; empty when the key
  // is unknown or revoked. For backends that hand a writer access to exactly these ranges (rdma).
  std::vector<std::pair<uint64_t, uint64_t>> ranges(uint64_t key) const;
  // A write refused elsewhere than admit() (rdma: by the device, or a grant asked for after its revocation).
  void count_refused();

  FenceStats stats() const;

 private:
  struct Fenced {
    uint64_t base = 0, length = 0, unit = 0;
    std::vector<uint64_t> owner;  // key per unit, 0 = nobody
  };
  struct Grant {
    std::vector<std::pair<size_t, uint64_t>> units;  // (region index, unit)
    uint32_t landing = 0;                            // frames being received under the key
    bool revoked = false;
  };
  mutable std::mutex mu_;
  std::atomic<bool> any_{false};  // a region is fenced: until then admit() takes no lock (every tcp frame)
  std::vector<Fenced> regions_;
  std::map<uint64_t, Grant> grants_;
  uint64_t refused_ = 0, revoked_busy_ = 0;
};

}  // namespace epd::transport
