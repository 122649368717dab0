#pragma once
// The process runner every role executable calls: parse flags, load and validate the config, build the
// transfer engine, the bridge and the actor system, spawn the role (and the registry where configured),
// register with the registry, then wait for SIGINT/SIGTERM and shut down cleanly (GOODBYE first).
namespace epd::actors {

// `fixed_role`: the role this executable serves (epd-prefill → "prefill"); nullptr for the generic
// epd-role, which takes --role. Returns the process exit code.
int run_role(int argc, char** argv, const char* fixed_role);

}  // namespace epd::actors
