#pragma once
// Ports for processes this process is about to start (tests, benches): free TCP ports on 127.0.0.1 below
// the kernel's ephemeral range, so that a port handed out and closed cannot be taken meanwhile by a
// process binding port 0 (every role's tcp data-plane listener does; CI once saw `cannot bind control
// endpoint`). Random from the pid, tried with a bind, and claimed for this process's lifetime by a lock
// file (in $TMPDIR/epd-ports) that concurrent processes respect; never the same port twice in this process
// (the kernel may hand a just-closed port out again), and never a port that browsers and fetch() refuse to
// connect to. Thread-safe.

namespace epd::launcher {

int free_port();

// The Fetch standard's "bad ports": browsers and Node's fetch (the OpenAI SDK, the dashboard test's
// Chromium) fail a request to them at once ("bad port") while other clients connect fine: a router on
// 10080, which free_port could pick, fails every SDK request with "Connection error.".
bool fetch_blocks_port(int port);

}  // namespace epd::launcher
