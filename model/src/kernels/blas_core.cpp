#include "kernels/blas_core.hpp"

#include <cblas.h>
#include <strings.h>

#include <cstdlib>
#include <mutex>

// OpenBLAS's dynamic-architecture entry points (exported by every DYNAMIC_ARCH build): quit forgets the
// chosen core, init chooses again, honouring OPENBLAS_CORETYPE.
extern "C" {
void gotoblas_dynamic_init(void);
void gotoblas_dynamic_quit(void);
}

namespace epd::model::detail {
namespace {

const char* core_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

}  // namespace

std::string select_blas_core() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice stands
    const char* current = openblas_get_corename();
    if (current == nullptr || ::strcasecmp(current, "prescott") != 0) return;  // OpenBLAS knew the CPU
    const char* better = core_for_this_cpu();
    if (better == nullptr) return;
    // Once, before the first sgemm (the runner's constructor). setenv is the variable OpenBLAS reads.
    ::setenv("OPENBLAS_CORETYPE", better, 0);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
  });
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

}  // namespace epd::model::detail
