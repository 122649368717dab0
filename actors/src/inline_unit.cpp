#include "inline_unit.hpp"

namespace epd::actors {

void InlineUnit::exec_later(caf::resumable* job) {
  // A message the running actor sends wakes its receiver through us too: that one goes to the scheduler,
  // so the channel thread never runs a chain of actors.
  if (running_) {
    system().scheduler().enqueue(job);
    return;
  }
  running_ = true;
  const auto result = job->resume(this, 1);
  running_ = false;
  switch (result) {
    case caf::resumable::resume_later:  // more mail: the scheduler takes it (and our reference)
      system().scheduler().enqueue(job);
      break;
    case caf::resumable::awaiting_message:
    case caf::resumable::done:
    case caf::resumable::shutdown_execution_unit:
      intrusive_ptr_release(job);  // the reference enqueue() took when it woke the actor
      break;
  }
}

void InlineUnit::deliver(const caf::actor& target, caf::message msg) {
  target->enqueue(caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::move(msg)), this);
}

}  // namespace epd::actors
