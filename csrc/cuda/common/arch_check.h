// Run-time facts about the current GPU: does a kernel have machine code for it, how many SMs it has.
// Kept free of ATen/cuda headers (they pull in cuBLAS/cuSPARSE headers a bare toolkit may lack).
#pragma once

namespace msa::cuda {

// Throws one clear c10::Error naming the GPU, its compute capability and the compiled targets when
// `kernel` (a __global__ function pointer) has no machine code for the current device. Cached per
// (kernel, device), so the steady-state cost is one hash lookup; never synchronizes.
void require_kernel_image(const void* kernel, const char* op);

// Number of SMs of the current device (cached per device).
int current_sm_count();

}  // namespace msa::cuda
