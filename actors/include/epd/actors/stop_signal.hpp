#pragma once

#include "epd/protocol/result.hpp"

namespace epd::actors {

// SIGINT and SIGTERM as a value the main thread waits for, whichever thread the kernel hands them to.
//
// sigwait alone is not enough: it needs the signals blocked in every thread, and libraries start threads
// before main runs (OpenBLAS's pool does, in its constructor) with both unblocked. A second SIGTERM — a
// launcher signals the process group and then the process — reached such a thread and killed the process
// mid-drain with the default action. A handler runs wherever the signal lands and only writes its number
// to a pipe; a repeated signal is harmless.
//
// Call block_stop_signals() before starting threads of our own (they keep both blocked, so their system
// calls are not interrupted), install_stop_handler() once (an error if its pipe cannot be made: then the
// role must not start), and wait_for_stop_signal() on the thread that stops the process: it unblocks both
// for that thread alone and returns the first signal's number.
void block_stop_signals();
protocol::Status install_stop_handler();
int wait_for_stop_signal();

}  // namespace epd::actors
