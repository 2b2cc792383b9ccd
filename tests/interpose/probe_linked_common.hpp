// Shared by the probes linked against libcuda.so.1 (probe_linked,
// probe_hostile): the primary context made current, and the sim kernels
// that fill a block with a pattern of 32-bit words and count the words that
// do not match it. (probe_dlopen never links the driver, so these are not in
// probe_common.hpp.)
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "probe_common.hpp"
#include "sim/sim_control.h"

namespace probe {

inline void make_context_current() {
  CUdevice device = 0;
  CUcontext context = nullptr;
  PROBE_CHECK(cuInit(0) == CUDA_SUCCESS);
  PROBE_CHECK(cuDeviceGet(&device, 0) == CUDA_SUCCESS);
  PROBE_CHECK(cuDevicePrimaryCtxRetain(&context, device) == CUDA_SUCCESS);
  PROBE_CHECK(cuCtxSetCurrent(context) == CUDA_SUCCESS);
}

// A seed with kSparseSeed set makes about half the words zero (as
// activations after a ReLU), so that evicted pages compress.
constexpr std::uint32_t kSparseSeed = 0x80000000u;
inline std::uint32_t word_pattern(std::uint32_t seed, std::size_t i) {
  const std::uint32_t word = seed ^ static_cast<std::uint32_t>(i * 2654435761u);
  return (seed & kSparseSeed) != 0 && ((word >> 13) & 1U) != 0 ? 0 : word;
}

// A sim kernel. params: words, count, seed
inline void fill_words(void** params, void* /*user*/) {
  auto* words = *static_cast<std::uint32_t**>(params[0]);
  const auto count = *static_cast<std::size_t*>(params[1]);
  const auto seed = *static_cast<std::uint32_t*>(params[2]);
  for (std::size_t i = 0; i < count; ++i) words[i] = word_pattern(seed, i);
}

// A sim kernel. params: words, count, seed, errors (words not matching are added)
inline void check_words(void** params, void* /*user*/) {
  const auto* words = *static_cast<const std::uint32_t**>(params[0]);
  const auto count = *static_cast<std::size_t*>(params[1]);
  const auto seed = *static_cast<std::uint32_t*>(params[2]);
  auto* errors = *static_cast<std::atomic<std::uint64_t>**>(params[3]);
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) bad += words[i] != word_pattern(seed, i) ? 1 : 0;
  errors->fetch_add(bad);
}

// Registers fill_words and check_words with the sim, each declared to touch
// `count` words from its pointer (so the sim's remap check sees the block).
// Library kernels, launched by their CUkernel handles cast to CUfunction, as
// the CUDA runtime (12.0 on) launches a program's kernels.
inline void register_word_kernels(CUfunction* fill, CUfunction* check) {
  const std::size_t sizes[] = {sizeof(void*), sizeof(std::size_t), sizeof(std::uint32_t), sizeof(void*)};
  CUkernel fill_kernel = nullptr;
  CUkernel check_kernel = nullptr;
  PROBE_CHECK(tidepool_sim_register_library_kernel(&fill_kernel, &fill_words, nullptr, 3, sizes) == CUDA_SUCCESS);
  PROBE_CHECK(tidepool_sim_register_library_kernel(&check_kernel, &check_words, nullptr, 4, sizes) == CUDA_SUCCESS);
  *fill = reinterpret_cast<CUfunction>(fill_kernel);
  *check = reinterpret_cast<CUfunction>(check_kernel);
  PROBE_CHECK(tidepool_sim_set_kernel_extent(*fill, 0, 1, 4) == CUDA_SUCCESS);
  PROBE_CHECK(tidepool_sim_set_kernel_extent(*check, 0, 1, 4) == CUDA_SUCCESS);
}

}  // namespace probe
