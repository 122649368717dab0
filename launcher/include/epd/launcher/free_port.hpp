#pragma once
// Ports for processes this process is about to start (tests, benches): free TCP ports on 127.0.0.1 below
// the kernel's ephemeral range, so that a port handed out and closed cannot be taken meanwhile by a
// process binding port 0 (every role's tcp data-plane listener does; CI once saw `cannot bind control
// endpoint`). Random from the pid, tried with a bind, so concurrent processes rarely meet; never the same
// port twice in this process (the kernel may hand a just-closed port out again). Thread-safe.

namespace epd::launcher {

int free_port();

}  // namespace epd::launcher
