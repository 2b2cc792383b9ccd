// The layer kernel of the residency benchmarks (bench_residency and
// bench_residency_live), registered with the sim: one layer of a training
// step that reads its inputs where they lie and writes its output.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

namespace tidepool::bench {

// The sim's VMM granularity: one word per page is touched.
constexpr std::size_t kTouchStride = std::size_t{2} << 20;

// The layer kernel: params are two inputs, one output (each may be 0), the
// block size and the sleep in nanoseconds. Reads go through volatile so the
// compiler cannot drop them; what they sum is written to the output, so the
// output's pages are written too.
inline void layer_kernel(void** params, void* /*user*/) {
  const auto start = std::chrono::steady_clock::now();
  const auto in_a = *static_cast<std::uintptr_t*>(params[0]);
  const auto in_b = *static_cast<std::uintptr_t*>(params[1]);
  const auto out = *static_cast<std::uintptr_t*>(params[2]);
  const auto bytes = *static_cast<std::size_t*>(params[3]);
  const auto sleep_ns = *static_cast<std::uint64_t*>(params[4]);
  const std::size_t last = bytes >= sizeof(std::uint64_t) ? bytes - sizeof(std::uint64_t) : 0;
  std::uint64_t sum = 0;
  for (const std::uintptr_t in : {in_a, in_b}) {
    if (in == 0) continue;
    for (std::size_t offset = 0; offset < last; offset += kTouchStride) {
      sum += *reinterpret_cast<const volatile std::uint64_t*>(in + offset);
    }
    sum += *reinterpret_cast<const volatile std::uint64_t*>(in + last);
  }
  if (out != 0) {
    for (std::size_t offset = 0; offset < last; offset += kTouchStride) {
      *reinterpret_cast<volatile std::uint64_t*>(out + offset) = sum + offset;
    }
    *reinterpret_cast<volatile std::uint64_t*>(out + last) = sum;
  }
  std::this_thread::sleep_until(start + std::chrono::nanoseconds(sleep_ns));
}

}  // namespace tidepool::bench
