// The device kernels of zero-value compression (format: zero_codec.hpp).
// Built by nvcc into the fatbin embedded in libtidepool and loaded through
// the driver table at run time; the simulated driver runs the reference
// functions of zero_codec.cpp under the same names, and the GPU test
// (tests/gpu/codec_kernels_test.cpp) holds the two to the same bytes.
//
// Every kernel takes the launch's PageTasks and runs one block of kThreads
// threads per chunk: blockIdx.x the chunk, blockIdx.y the page. Element i of
// a chunk is thread (i % kThreads)'s, so each warp's loads are contiguous
// and bit (i % 32) of mask word (i / 32) is its lane's ballot.
#include "kernels/zero_codec.hpp"

using tidepool::kernels::Codec;
using tidepool::kernels::PageTask;
using tidepool::kernels::PageTasks;
namespace codec = tidepool::kernels;

namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffU;

__device__ unsigned block_sum(unsigned value, unsigned* partial) {
  for (unsigned offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(kFull, value, offset);
  if ((threadIdx.x & 31U) == 0) partial[threadIdx.x >> 5] = value;
  __syncthreads();
  unsigned total = 0;
  for (unsigned w = 0; w < kWarps; ++w) total += partial[w];
  return total;
}

__device__ unsigned nonzero_halves(unsigned word) {
  return ((word & 0xffffU) != 0 ? 1U : 0U) + ((word >> 16) != 0 ? 1U : 0U);
}

// Each mask word's first element's place among the chunk's non-zero ones.
template <unsigned kMasks>
__device__ void scan_masks(const unsigned* masks, unsigned* base) {
  if (threadIdx.x == 0) {
    unsigned sum = 0;
    for (unsigned m = 0; m < kMasks; ++m) {
      base[m] = sum;
      sum += __popc(masks[m]);
    }
    base[kMasks] = sum;
  }
  __syncthreads();
}

template <typename Element>
__device__ void pack_chunk(const Element* in, unsigned char* out) {
  constexpr unsigned kElements = codec::kChunkBytes / sizeof(Element);
  constexpr unsigned kMasks = kElements / 32;
  constexpr unsigned kPer = kElements / kThreads;
  __shared__ unsigned masks[kMasks];
  __shared__ unsigned base[kMasks + 1];
  const unsigned lane = threadIdx.x & 31U;
  const unsigned warp = threadIdx.x >> 5;
  Element e[kPer];
  for (unsigned k = 0; k < kPer; ++k) {
    e[k] = in[k * kThreads + threadIdx.x];
    const unsigned bits = __ballot_sync(kFull, e[k] != 0);
    if (lane == 0) masks[k * kWarps + warp] = bits;
  }
  __syncthreads();
  scan_masks<kMasks>(masks, base);
  auto* mask_out = reinterpret_cast<unsigned*>(out);
  for (unsigned m = threadIdx.x; m < kMasks; m += kThreads) mask_out[m] = masks[m];
  auto* values = reinterpret_cast<Element*>(out + kMasks * 4);
  const unsigned below = (1U << lane) - 1U;
  for (unsigned k = 0; k < kPer; ++k) {
    if (e[k] == 0) continue;
    const unsigned m = k * kWarps + warp;
    values[base[m] + __popc(masks[m] & below)] = e[k];
  }
  // The padding to 4 bytes is zero, as the reference writes it.
  const unsigned total = base[kMasks];
  if (threadIdx.x == 0) {
    for (unsigned at = total * sizeof(Element); at % 4 != 0; at += sizeof(Element)) values[at / sizeof(Element)] = 0;
  }
}

template <typename Element>
__device__ void unpack_chunk(const unsigned char* in, Element* out) {
  constexpr unsigned kElements = codec::kChunkBytes / sizeof(Element);
  constexpr unsigned kMasks = kElements / 32;
  constexpr unsigned kPer = kElements / kThreads;
  __shared__ unsigned masks[kMasks];
  __shared__ unsigned base[kMasks + 1];
  const auto* mask_in = reinterpret_cast<const unsigned*>(in);
  for (unsigned m = threadIdx.x; m < kMasks; m += kThreads) masks[m] = mask_in[m];
  __syncthreads();
  scan_masks<kMasks>(masks, base);
  const auto* values = reinterpret_cast<const Element*>(in + kMasks * 4);
  const unsigned lane = threadIdx.x & 31U;
  const unsigned warp = threadIdx.x >> 5;
  const unsigned below = (1U << lane) - 1U;
  for (unsigned k = 0; k < kPer; ++k) {
    const unsigned m = k * kWarps + warp;
    const bool set = ((masks[m] >> lane) & 1U) != 0;
    out[k * kThreads + threadIdx.x] = set ? values[base[m] + __popc(masks[m] & below)] : Element{0};
  }
}

__device__ unsigned offset_in(std::uint64_t prefix, unsigned chunk) {
  return reinterpret_cast<const unsigned*>(prefix + codec::offsets_at())[chunk];
}

}  // namespace

// Each sampled chunk's count word (codec::count_word); chunks
// blockIdx.x * stride, so a stride above 1 samples the page.
extern "C" __global__ void __launch_bounds__(kThreads) tidepool_zvc_count(const PageTasks tasks, unsigned stride) {
  const PageTask& task = tasks.page[blockIdx.y];
  const unsigned chunk = blockIdx.x * stride;
  if (chunk >= task.chunks) return;
  const uint4 v = reinterpret_cast<const uint4*>(task.device + std::uint64_t{chunk} * codec::kChunkBytes)[threadIdx.x];
  __shared__ unsigned partial32[kWarps];
  __shared__ unsigned partial16[kWarps];
  const unsigned n32 = block_sum((v.x != 0) + (v.y != 0) + (v.z != 0) + (v.w != 0), partial32);
  const unsigned n16 =
      block_sum(nonzero_halves(v.x) + nonzero_halves(v.y) + nonzero_halves(v.z) + nonzero_halves(v.w), partial16);
  if (threadIdx.x == 0) reinterpret_cast<unsigned*>(task.table)[chunk] = codec::count_word(n32, n16);
}

// Chunk 0's block also copies the prefix (header and offsets) the host
// wrote in the table to the stream's start.
extern "C" __global__ void __launch_bounds__(kThreads) tidepool_zvc_pack(const PageTasks tasks) {
  const PageTask& task = tasks.page[blockIdx.y];
  const unsigned chunk = blockIdx.x;
  if (chunk >= task.chunks) return;
  if (chunk == 0) {
    const auto* prefix = reinterpret_cast<const unsigned*>(task.table);
    auto* to = reinterpret_cast<unsigned*>(task.stream);
    for (unsigned w = threadIdx.x; w < codec::payloads_at(task.chunks) / 4; w += kThreads) to[w] = prefix[w];
  }
  const std::uint64_t from = task.device + std::uint64_t{chunk} * codec::kChunkBytes;
  auto* out = reinterpret_cast<unsigned char*>(task.stream + offset_in(task.table, chunk));
  if (static_cast<Codec>(task.codec) == Codec::zero16) {
    pack_chunk(reinterpret_cast<const unsigned short*>(from), out);
  } else {
    pack_chunk(reinterpret_cast<const unsigned*>(from), out);
  }
}

extern "C" __global__ void __launch_bounds__(kThreads) tidepool_zvc_unpack(const PageTasks tasks) {
  const PageTask& task = tasks.page[blockIdx.y];
  const unsigned chunk = blockIdx.x;
  if (chunk >= task.chunks) return;
  const std::uint64_t to = task.device + std::uint64_t{chunk} * codec::kChunkBytes;
  const auto* in = reinterpret_cast<const unsigned char*>(task.stream + offset_in(task.stream, chunk));
  if (static_cast<Codec>(task.codec) == Codec::zero16) {
    unpack_chunk(in, reinterpret_cast<unsigned short*>(to));
  } else {
    unpack_chunk(in, reinterpret_cast<unsigned*>(to));
  }
}
