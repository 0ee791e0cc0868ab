#include <cmath>

#include "kvplan/checked.hpp"
#include "kvplan/memory.hpp"

namespace kvplan {

// Memory a process holds outside ggml's buffers (docs/formulas.md §7):
// the driver context (CUDA: 107 MiB on an RTX 4060 Ti to 555 MiB on an RTX PRO 6000, llama.cpp
// PR #20595), the cuBLAS workspace (ggml-cuda/common.cuh cublas_handle(): 32 MiB on Hopper and
// newer, 4 MiB before) and the growth of ggml's VMM pool, which never shrinks.
Figure runtime_overhead(const GpuSpec* gpu, const BackendSpec& backend) {
  bool hopper_or_newer = false;
  if (gpu && !gpu->compute_capability.empty()) hopper_or_newer = std::atof(gpu->compute_capability.c_str()) >= 9.0;
  const double blas = static_cast<double>(hopper_or_newer ? backend.blas_workspace_mib_hopper : backend.blas_workspace_mib);
  const double typical = backend.context.typical_mib + backend.pool.typical_mib + blas;
  const double high = backend.context.high_mib + backend.pool.high_mib + blas;
  return Figure::estimate(checked_bytes(typical * kMiB, "runtime overhead"), checked_bytes(high * kMiB, "runtime overhead"));
}

}  // namespace kvplan
