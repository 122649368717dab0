#pragma once
// The rooms a role holds, by id, plus bounded tombstones: how each recently ended room ended (ok, or its
// failure). A late SUBMIT/BOOTSTRAP/EMBED_META for an ended room must not bring it back to life (nobody
// would finish it), and a peer still working for it can be told the real cause.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "epd/protocol/errors.hpp"

namespace epd::actors::kernel {

template <class Room>
class RoomTable {
 public:
  explicit RoomTable(size_t tombstones = 4096) : tombstones_(tombstones) {}

  Room* find(uint64_t id) {
    auto it = rooms_.find(id);
    return it == rooms_.end() ? nullptr : &it->second;
  }
  const Room* find(uint64_t id) const {
    auto it = rooms_.find(id);
    return it == rooms_.end() ? nullptr : &it->second;
  }
  bool contains(uint64_t id) const { return rooms_.count(id) != 0; }
  // The room `id`, created (default) if absent; `created` says which.
  Room& find_or_create(uint64_t id, bool& created) {
    auto [it, fresh] = rooms_.try_emplace(id);
    created = fresh;
    return it->second;
  }
  Room& insert(uint64_t id, Room room) { return rooms_.insert_or_assign(id, std::move(room)).first->second; }
  // Removes the room without a tombstone (e.g. it moves to another table).
  Room take(uint64_t id) {
    auto node = rooms_.extract(id);
    return std::move(node.mapped());
  }
  // Removes the room and remembers how it ended (by default: it completed; protocol::Error{} would say
  // `internal`).
  void end(uint64_t id, protocol::Error outcome = {protocol::ErrorCode::ok, false, ""}) {
    rooms_.erase(id);
    if (tombstones_ == 0) return;
    if (ended_.insert_or_assign(id, std::move(outcome)).second) order_.push_back(id);
    if (order_.size() > tombstones_) {
      ended_.erase(order_.front());
      order_.pop_front();
    }
  }
  // How room `id` ended here, if it did recently (code ok: it completed).
  const protocol::Error* ended(uint64_t id) const {
    auto it = ended_.find(id);
    return it == ended_.end() ? nullptr : &it->second;
  }

  size_t size() const { return rooms_.size(); }
  bool empty() const { return rooms_.empty(); }
  auto begin() { return rooms_.begin(); }
  auto end() { return rooms_.end(); }
  auto begin() const { return rooms_.begin(); }
  auto end() const { return rooms_.end(); }
  // Ids of the rooms for which `pred(id, room)` holds, collected first so the caller may end them.
  template <class Pred>
  std::vector<uint64_t> ids_where(Pred pred) const {
    std::vector<uint64_t> out;
    for (const auto& [id, room] : rooms_)
      if (pred(id, room)) out.push_back(id);
    return out;
  }

 private:
  std::map<uint64_t, Room> rooms_;
  std::map<uint64_t, protocol::Error> ended_;
  std::deque<uint64_t> order_;
  size_t tombstones_;
};

}  // namespace epd::actors::kernel
