#pragma once
// Runs an idle actor's next message on the calling thread (the bridge's channel thread), instead of waking a
// scheduler worker for it: one thread hand-off fewer per control frame. CAF hands an actor to the execution
// unit named in enqueue() exactly when that enqueue woke it (its mailbox was empty and blocked), so the
// actor runs on one thread at a time as always. It runs one message; if more are waiting it goes back to
// the scheduler, and anything it wakes in turn (a message it sends) is scheduled as usual.
#include <caf/all.hpp>

namespace epd::actors {

class InlineUnit final : public caf::execution_unit {
 public:
  explicit InlineUnit(caf::actor_system* sys) : caf::execution_unit(sys) {}
  void exec_later(caf::resumable* job) override;
  // Delivers `msg` to `target` (anonymous, normal priority, like anon_send); runs it here if it was idle.
  void deliver(const caf::actor& target, caf::message msg);

 private:
  bool running_ = false;
};

}  // namespace epd::actors
