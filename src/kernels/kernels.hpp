// The kernels layer's one header: tidepool's own device code. The CUDA
// source (zero_codec.cu) is compiled at build time by the toolkit's nvcc into
// a fatbin that is embedded in the library and loaded through the driver
// table (cuModuleLoadData); the format it shares with the host, and a host
// reference of each kernel that the simulated driver runs by name, are here
// too. Nothing here calls the driver.
#pragma once

#include <span>

#include "kernels/zero_codec.hpp"

namespace tidepool::kernels {

// The fatbin of zero_codec.cu (sm_80, sm_90 and PTX for later GPUs); empty
// when the build found no nvcc, and compression is then off.
std::span<const unsigned char> image() noexcept;

inline constexpr const char* kCountKernel = "tidepool_zvc_count";
inline constexpr const char* kPackKernel = "tidepool_zvc_pack";
inline constexpr const char* kUnpackKernel = "tidepool_zvc_unpack";
// Threads per block of every kernel (zero_codec.cu's kThreads).
inline constexpr unsigned kThreadsPerBlock = 256;

}  // namespace tidepool::kernels
