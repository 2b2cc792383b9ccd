// The layer kernel of the residency benchmarks (bench_residency and
// bench_residency_live), registered with the sim: one layer of a training
// step that reads its inputs where they lie and writes its output.
#pragma once

#include <atomic>
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

namespace tidepool::bench {

// The data layer kernel (bench_residency --data): blocks hold data of a
// chosen sparsity, every word of each written by the kernel that makes the
// block and checked by each kernel that reads it, so that evicted pages hold
// what a codec would meet and every byte is verified. A block's data is its
// DataSpec: a seed and the zero words in 256.
struct DataSpec {
  std::uint32_t seed = 0;
  std::uint32_t zero_per_256 = 0;
};
inline std::uint64_t pack_spec(DataSpec s) { return s.seed | (std::uint64_t{s.zero_per_256} << 32); }
inline DataSpec unpack_spec(std::uint64_t w) {
  return {static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(w >> 32)};
}
// Word i of a block: a hash of the seed and index, zero for a share of the
// words set by zero_per_256, and otherwise never zero.
inline std::uint32_t data_word(DataSpec s, std::size_t i) {
  const std::uint32_t h = (static_cast<std::uint32_t>(i) * 0x9E3779B1U ^ s.seed) * 0x85EBCA6BU;
  return (h >> 24) < s.zero_per_256 ? 0 : (h | 1U);
}

// params: in_a, in_b, out (each may be 0), bytes, sleep_ns, then the three
// blocks' packed DataSpecs, then a std::atomic<std::uint64_t>* that counts
// the words read wrong.
inline void data_layer_kernel(void** params, void* /*user*/) {
  const auto start = std::chrono::steady_clock::now();
  const std::uintptr_t blocks[3] = {*static_cast<std::uintptr_t*>(params[0]), *static_cast<std::uintptr_t*>(params[1]),
                                    *static_cast<std::uintptr_t*>(params[2])};
  const auto bytes = *static_cast<std::size_t*>(params[3]);
  const auto sleep_ns = *static_cast<std::uint64_t*>(params[4]);
  auto* errors = *static_cast<std::atomic<std::uint64_t>**>(params[8]);
  const std::size_t words = bytes / sizeof(std::uint32_t);
  std::uint64_t wrong = 0;
  for (int in = 0; in < 2; ++in) {
    if (blocks[in] == 0) continue;
    const DataSpec spec = unpack_spec(*static_cast<std::uint64_t*>(params[5 + in]));
    const auto* w = reinterpret_cast<const std::uint32_t*>(blocks[in]);
    for (std::size_t i = 0; i < words; ++i) wrong += w[i] != data_word(spec, i) ? 1 : 0;
  }
  if (blocks[2] != 0) {
    const DataSpec spec = unpack_spec(*static_cast<std::uint64_t*>(params[7]));
    auto* w = reinterpret_cast<std::uint32_t*>(blocks[2]);
    for (std::size_t i = 0; i < words; ++i) w[i] = data_word(spec, i);
  }
  if (wrong > 0) errors->fetch_add(wrong);
  std::this_thread::sleep_until(start + std::chrono::nanoseconds(sleep_ns));
}

}  // namespace tidepool::bench
