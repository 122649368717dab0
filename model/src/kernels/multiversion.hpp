#pragma once
// The model's hot loops are compiled for several x86-64 levels, and the dynamic loader picks the best one the
// CPU has (GCC function multi-versioning: one ifunc per marked function). So one build runs its matmuls and
// attention with AVX-512 on this host and still runs where there is none (qemu's TCG in the RDMA VM, older
// servers), instead of a -march=native binary per machine. The bits do not depend on the version chosen:
// kernels.hpp's determinism rule (no FMA contraction, fixed reduction order) holds on every ISA.
// Mark only functions whose loops are inlined into them: a call out of a clone runs the callee's own code.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(EPD_NO_MULTIVERSION)
#define EPD_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define EPD_HAS_MULTIVERSION 1  // per-ISA versions written out by hand may be used too
#else
#define EPD_MULTIVERSION
#define EPD_HAS_MULTIVERSION 0
#endif
