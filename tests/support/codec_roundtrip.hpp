// Test support: tidepool's compression kernels (kernels/zero_codec.cu) run
// through PageCodec on whatever driver is given, the sim (which runs its
// reference of them) or a GPU's, and held byte for byte to the host
// reference: the counts, every stream, and the pages unpacked again. One
// body for both, so the sim's reference and the GPU's kernels cannot
// disagree unnoticed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "driver/driver.hpp"
#include "kernels/kernels.hpp"
#include "residency/residency.hpp"

namespace tidepool::testing {

enum class PageData { dense_random, half_zero32, half_zero16, all_zero, sparse_words, tail_zero };

inline const char* page_data_name(PageData d) {
  switch (d) {
    case PageData::dense_random: return "dense random";
    case PageData::half_zero32: return "half of the 4-byte words zero";
    case PageData::half_zero16: return "half of the 2-byte halves zero";
    case PageData::all_zero: return "all zero";
    case PageData::sparse_words: return "one word in 64 non-zero";
    case PageData::tail_zero: return "the second half zero";
  }
  return "?";
}

inline std::vector<unsigned char> page_bytes(PageData d, std::size_t size, std::uint32_t seed) {
  std::vector<unsigned char> bytes(size, 0);
  std::mt19937 random(seed);
  const auto word = [&] {
    std::uint32_t w = 0;
    while (w == 0) w = random();
    return w;
  };
  for (std::size_t at = 0; at + 4 <= size; at += 4) {
    std::uint32_t w = 0;
    switch (d) {
      case PageData::dense_random: w = word(); break;
      case PageData::half_zero32: w = (random() & 1U) != 0 ? word() : 0; break;
      case PageData::half_zero16: {
        const std::uint32_t low = (random() & 1U) != 0 ? (word() & 0xffffU) | 1U : 0;
        const std::uint32_t high = (random() & 1U) != 0 ? (word() & 0xffffU) | 1U : 0;
        w = low | (high << 16);
        break;
      }
      case PageData::all_zero: break;
      case PageData::sparse_words: w = (at / 4) % 64 == 0 ? word() : 0; break;
      case PageData::tail_zero: w = at < size / 2 ? word() : 0; break;
    }
    std::memcpy(bytes.data() + at, &w, 4);
  }
  return bytes;
}

// The stream the host reference makes of `page` at `codec`.
inline std::vector<unsigned char> reference_stream(const std::vector<unsigned char>& page, kernels::Codec codec) {
  const auto chunks = static_cast<std::uint32_t>(page.size() / kernels::kChunkBytes);
  std::vector<std::uint32_t> counts(chunks);
  for (std::uint32_t c = 0; c < chunks; ++c)
    counts[c] = kernels::reference_count(page.data() + c * kernels::kChunkBytes);
  std::vector<unsigned char> stream(kernels::max_stream_bytes(chunks));
  const std::uint32_t length = kernels::write_prefix(codec, counts.data(), chunks, stream.data());
  std::uint32_t at = kernels::payloads_at(chunks);
  for (std::uint32_t c = 0; c < chunks; ++c) {
    at += kernels::reference_pack(codec, page.data() + c * kernels::kChunkBytes, stream.data() + at);
  }
  EXPECT_EQ(at, length);
  stream.resize(length);
  return stream;
}

// Counts, packs and unpacks `pages` pages of each kind of data at both
// codecs on `driver` (the context current), comparing with the reference.
inline void codec_round_trip(const driver::Driver& driver, CUcontext context, std::size_t page_size) {
  const driver::Api& api = driver.api();
  auto created = residency::PageCodec::create(driver, context, page_size);
  ASSERT_TRUE(created.ok()) << created.status().message();
  residency::PageCodec& codec = *created.value();
  const std::uint32_t chunks = codec.chunks();
  const std::vector<PageData> kinds = {PageData::dense_random, PageData::half_zero32,  PageData::half_zero16,
                                       PageData::all_zero,     PageData::sparse_words, PageData::tail_zero};
  const std::size_t n = kinds.size();
  CUdeviceptr device = 0;
  CUdeviceptr decoded = 0;
  ASSERT_EQ(api.memAlloc(&device, n * page_size), CUDA_SUCCESS);
  ASSERT_EQ(api.memAlloc(&decoded, n * page_size), CUDA_SUCCESS);
  void* streams_host = nullptr;
  const std::size_t stream_room = kernels::max_stream_bytes(chunks) + 256;  // a canary after the longest
  ASSERT_EQ(api.memHostAlloc(&streams_host, n * stream_room, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  CUdeviceptr streams = 0;
  ASSERT_EQ(api.memHostGetDevicePointer(&streams, streams_host, 0), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(api.streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

  std::vector<std::vector<unsigned char>> data;
  std::vector<CUdeviceptr> pages;
  for (std::size_t i = 0; i < n; ++i) {
    data.push_back(page_bytes(kinds[i], page_size, static_cast<std::uint32_t>(17 + i)));
    pages.push_back(device + i * page_size);
    ASSERT_EQ(api.memcpyHtoD(pages[i], data[i].data(), page_size), CUDA_SUCCESS);
  }
  // Copies from pageable memory may still be queued on the legacy stream,
  // which `stream` (non-blocking) does not wait for.
  ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);
  // The sample: one chunk in 16, estimating each codec's stream.
  ASSERT_TRUE(codec.count(pages.data(), n, 16, stream));
  ASSERT_EQ(api.streamSynchronize(stream), CUDA_SUCCESS);
  std::vector<std::uint64_t> sampled32(n);
  for (std::size_t i = 0; i < n; ++i) sampled32[i] = codec.estimate(i, 16, kernels::Codec::zero32);

  for (const kernels::Codec c : {kernels::Codec::zero32, kernels::Codec::zero16}) {
    SCOPED_TRACE(c == kernels::Codec::zero32 ? "zero32" : "zero16");
    ASSERT_TRUE(codec.count(pages.data(), n, 1, stream));
    ASSERT_EQ(api.streamSynchronize(stream), CUDA_SUCCESS);
    std::vector<residency::PageCodec::Page> packs;
    for (std::size_t i = 0; i < n; ++i) {
      SCOPED_TRACE(page_data_name(kinds[i]));
      const std::vector<unsigned char> expected = reference_stream(data[i], c);
      if (c == kernels::Codec::zero32 && kinds[i] != PageData::tail_zero) {
        // Evenly spread data: the sample's estimate is close to the stream.
        const double ratio = static_cast<double>(sampled32[i]) / static_cast<double>(expected.size());
        EXPECT_GT(ratio, 0.9);
        EXPECT_LT(ratio, 1.1);
      }
      EXPECT_EQ(codec.estimate(i, 1, c), expected.size()) << "the exact count gives the stream's length";
      const std::uint32_t length = codec.plan(i, c);
      ASSERT_EQ(length, expected.size());
      std::memset(static_cast<unsigned char*>(streams_host) + i * stream_room, 0xA5, stream_room);
      packs.push_back({pages[i], streams + i * stream_room, c, i});
    }
    ASSERT_TRUE(codec.pack(packs.data(), packs.size(), stream));
    ASSERT_EQ(api.streamSynchronize(stream), CUDA_SUCCESS);
    for (std::size_t i = 0; i < n; ++i) {
      SCOPED_TRACE(page_data_name(kinds[i]));
      const std::vector<unsigned char> expected = reference_stream(data[i], c);
      const auto* got = static_cast<const unsigned char*>(streams_host) + i * stream_room;
      std::size_t differ = 0;
      for (std::size_t b = 0; b < expected.size(); ++b) differ += got[b] != expected[b] ? 1 : 0;
      EXPECT_EQ(differ, 0U) << "bytes of the stream that differ from the reference's";
      EXPECT_EQ(got[expected.size()], 0xA5) << "the pack wrote past its stream";
      EXPECT_TRUE(kernels::valid_stream(got, expected.size(), page_size));
    }
    ASSERT_EQ(api.memsetD8(decoded, 0x5A, n * page_size), CUDA_SUCCESS);
    ASSERT_EQ(api.streamSynchronize(nullptr), CUDA_SUCCESS);  // a set on device memory returns before it runs
    std::vector<residency::PageCodec::Page> unpacks;
    for (std::size_t i = 0; i < n; ++i) unpacks.push_back({decoded + i * page_size, streams + i * stream_room, c, 0});
    ASSERT_TRUE(codec.unpack(unpacks.data(), unpacks.size(), stream));
    ASSERT_EQ(api.streamSynchronize(stream), CUDA_SUCCESS);
    for (std::size_t i = 0; i < n; ++i) {
      SCOPED_TRACE(page_data_name(kinds[i]));
      std::vector<unsigned char> back(page_size);
      ASSERT_EQ(api.memcpyDtoH(back.data(), decoded + i * page_size, page_size), CUDA_SUCCESS);
      EXPECT_TRUE(back == data[i]) << "the page unpacked differs from the page packed";
    }
  }
  (void)api.streamDestroy(stream);
  (void)api.memFreeHost(streams_host);
  (void)api.memFree(device);
  (void)api.memFree(decoded);
}

}  // namespace tidepool::testing
