#pragma once
// OpenBLAS's kernels for this CPU (prefill's sgemm).
#include <string>

namespace epd::model::detail {

// Debian 12's OpenBLAS (0.3.21, built for every x86-64 core) picks its kernels by the CPU's model number. A
// CPU it does not know (Xeons newer than it, virtual CPUs with a generic model) gets the SSE3 "Prescott"
// kernels: 2.3x slower prefill than its AVX-512 ones on such a machine. When OpenBLAS fell back to Prescott
// and the user did not choose a core (OPENBLAS_CORETYPE), this selects the one the CPU's features allow
// (SkylakeX with AVX-512, Haswell with AVX2 and FMA) through OpenBLAS's own selection path, once per
// process. Returns the core in use afterwards (e.g. "SkylakeX").
std::string select_blas_core();

}  // namespace epd::model::detail
