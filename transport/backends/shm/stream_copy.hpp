#pragma once
// The shm writer's copy. Large copies use non-temporal (streaming) stores: the bytes are for another
// process, and a cold multi-MiB destination written through the cache first reads every line it writes
// (read-for-ownership), which costs a third of the memory traffic. glibc's memcpy switches to streaming
// stores only above a threshold derived from the shared cache size the CPU reports (99 MiB on the 2-core
// VMs, whose host reports a 260 MiB L3), so it never does for our blocks. docs/transport.md has the figures.
#include <cstddef>
#include <cstdint>

namespace epd::transport::shm {

// Copies of at least this many bytes stream; smaller ones use memcpy (they may still be in cache when the
// peer reads them, and the fence below is not free).
inline constexpr size_t kStreamCopyMinBytes = 256 << 10;

// memcpy semantics (no overlap). Streaming stores are made globally visible (sfence) before it returns, so
// a completion signalled after it orders after every byte.
void copy_to_peer(uint8_t* dst, const uint8_t* src, size_t n);

// The streaming path itself, whatever the size (for tests), with the widest stores the CPU has (picked once);
// plain memcpy off x86-64.
void stream_copy(uint8_t* dst, const uint8_t* src, size_t n);

}  // namespace epd::transport::shm
