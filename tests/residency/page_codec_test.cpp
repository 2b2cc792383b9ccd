// The compression kernels through PageCodec on the sim (which runs its
// reference of them by name), the stream format's checks, and the sim's
// modules. The same round trip runs on a GPU in tests/gpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "support/codec_roundtrip.hpp"
#include "support/sim_driver.hpp"

namespace tidepool {
namespace {

using kernels::Codec;

class PageCodecOnSim : public testing::WithPrimaryContext {
 protected:
  static constexpr std::size_t kPage = 2 << 20;

  void SetUp() override {
    testing::WithPrimaryContext::SetUp();
    if (kernels::image().empty()) GTEST_SKIP() << "built without nvcc: no kernels";
  }
  void TearDown() override {
    if (page_ != 0) (void)testing::sim_driver().api().memFree(page_);
    testing::WithPrimaryContext::TearDown();
  }
  // A codec of kPage pages, and a device page (page_) holding half-zero
  // words drawn from `seed` (data_).
  void make_codec_and_page(std::uint32_t seed) {
    auto created = residency::PageCodec::create(testing::sim_driver(), context_, kPage);
    ASSERT_TRUE(created.ok()) << created.status().message();
    codec_ = std::move(created.value());
    const driver::Api& api = testing::sim_driver().api();
    ASSERT_EQ(api.memAlloc(&page_, kPage), CUDA_SUCCESS);
    data_ = testing::page_bytes(testing::PageData::half_zero32, kPage, seed);
    ASSERT_EQ(api.memcpyHtoD(page_, data_.data(), kPage), CUDA_SUCCESS);
  }

  std::unique_ptr<residency::PageCodec> codec_;
  CUdeviceptr page_ = 0;
  std::vector<unsigned char> data_;
};

TEST_F(PageCodecOnSim, KernelsMakeTheReferenceStreamsAndUnpackThemOn2MiBPages) {
  testing::codec_round_trip(testing::sim_driver(), context_, 2 << 20);
}

TEST_F(PageCodecOnSim, KernelsMakeTheReferenceStreamsAndUnpackThemOnSmallPages) {
  testing::codec_round_trip(testing::sim_driver(), context_, 64 << 10);
}

TEST_F(PageCodecOnSim, APageSizeThatIsNotWholeChunksIsRefused) {
  auto codec = residency::PageCodec::create(testing::sim_driver(), context_, 6000);
  ASSERT_FALSE(codec.ok());
  EXPECT_EQ(codec.status().error(), util::Error::not_supported);
}

TEST_F(PageCodecOnSim, TheSimLoadsOnlyFatbinsAndKnowsOnlyTidepoolsKernels) {
  const driver::Api& api = testing::sim_driver().api();
  CUmodule module = nullptr;
  const char not_an_image[] = "this is not a fatbin";
  EXPECT_EQ(api.moduleLoadData(&module, not_an_image), CUDA_ERROR_INVALID_IMAGE);
  ASSERT_EQ(api.moduleLoadData(&module, kernels::image().data()), CUDA_SUCCESS);
  CUfunction f = nullptr;
  EXPECT_EQ(api.moduleGetFunction(&f, module, "some_kernel_of_another_library"), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(api.moduleGetFunction(&f, module, kernels::kCountKernel), CUDA_SUCCESS);
  ASSERT_EQ(api.moduleUnload(module), CUDA_SUCCESS);
  kernels::PageTasks tasks;  // no pages: a launch of nothing
  std::uint32_t stride = 1;
  void* params[] = {&tasks, &stride};
  EXPECT_EQ(api.launchKernel(f, 1, 1, 1, kernels::kThreadsPerBlock, 1, 1, 0, nullptr, params, nullptr),
            CUDA_ERROR_INVALID_HANDLE)
      << "a function of an unloaded module cannot be launched";
  EXPECT_EQ(api.moduleUnload(module), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(PageCodecOnSim, PackedBytesCrossTheBusAtTheCopyBandwidthAndCountAsCopied) {
  const driver::Api& api = testing::sim_driver().api();
  auto set_gbps = testing::sim_control<void (*)(double)>("tidepool_sim_set_copy_gbps");
  auto copied = testing::sim_control<std::uint64_t (*)(int)>("tidepool_sim_copied_bytes");
  ASSERT_NE(set_gbps, nullptr);
  ASSERT_NE(copied, nullptr);
  ASSERT_NO_FATAL_FAILURE(make_codec_and_page(5));
  residency::PageCodec& codec = *codec_;
  void* host = nullptr;
  ASSERT_EQ(api.memHostAlloc(&host, kernels::max_stream_bytes(codec.chunks()), CU_MEMHOSTALLOC_DEVICEMAP),
            CUDA_SUCCESS);
  CUdeviceptr stream_at = 0;
  ASSERT_EQ(api.memHostGetDevicePointer(&stream_at, host, 0), CUDA_SUCCESS);
  ASSERT_TRUE(codec.count(&page_, 1, 1, nullptr));
  ASSERT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
  const std::uint32_t length = codec.plan(0, Codec::zero32);
  EXPECT_LT(length, kPage * 6 / 10) << "half the words zero: a little over half the bytes";
  set_gbps(1);  // 1 GB/s: a millisecond a megabyte
  const std::uint64_t before = copied(0);
  const residency::PageCodec::Page p{page_, stream_at, Codec::zero32, 0};
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(codec.pack(&p, 1, nullptr));
  ASSERT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  set_gbps(0);
  EXPECT_EQ(copied(0) - before, length) << "the stream's bytes, and no more, crossed to the host";
  EXPECT_GE(ms, static_cast<double>(length) / 1e6 * 0.9) << "the pack took the bus's time for its bytes";
  (void)api.memFreeHost(host);
}

// A GPU faults on a kernel's access off its alignment, and a pack trusts
// the offsets in its table. The first GPU run of the throughput test
// planned, then counted again (the count's words overwrite the prefix), and
// the pack faulted with CUDA_ERROR_MISALIGNED_ADDRESS; the sim wrote the
// bytes wherever the counts pointed. It now faults too, and writes nothing.
TEST_F(PageCodecOnSim, APackWhoseTableWasCountedOverFaultsAndWritesNothing) {
  const driver::Api& api = testing::sim_driver().api();
  auto misaligned = testing::sim_control<std::uint64_t (*)()>("tidepool_sim_misaligned_faults");
  auto access = testing::sim_control<std::uint64_t (*)()>("tidepool_sim_access_faults");
  auto clear = testing::sim_control<void (*)()>("tidepool_sim_clear_faults");
  ASSERT_NE(misaligned, nullptr);
  ASSERT_NE(access, nullptr);
  ASSERT_NE(clear, nullptr);
  ASSERT_NO_FATAL_FAILURE(make_codec_and_page(1));
  residency::PageCodec& codec = *codec_;
  const std::size_t room = kernels::max_stream_bytes(codec.chunks());
  void* host = nullptr;
  ASSERT_EQ(api.memHostAlloc(&host, room + 8, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  CUdeviceptr stream_at = 0;
  ASSERT_EQ(api.memHostGetDevicePointer(&stream_at, host, 0), CUDA_SUCCESS);
  const auto untouched = [&] {
    const auto* bytes = static_cast<const unsigned char*>(host);
    return std::all_of(bytes, bytes + room + 8, [](unsigned char b) { return b == 0xA5; });
  };
  std::memset(host, 0xA5, room + 8);

  ASSERT_TRUE(codec.count(&page_, 1, 1, nullptr));
  ASSERT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
  (void)codec.plan(0, Codec::zero32);
  ASSERT_TRUE(codec.count(&page_, 1, 1, nullptr));  // over the prefix just planned
  ASSERT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
  const std::uint64_t faults_before = misaligned() + access();
  const residency::PageCodec::Page p{page_, stream_at, Codec::zero32, 0};
  ASSERT_TRUE(codec.pack(&p, 1, nullptr)) << "the launch is queued; the kernel faults when it runs";
  EXPECT_NE(api.ctxSynchronize(), CUDA_SUCCESS) << "the fault is the context's sticky error";
  EXPECT_EQ(misaligned() + access(), faults_before + 1);
  EXPECT_TRUE(untouched()) << "a faulting pack writes nothing";
  clear();

  // Planned from the last count, a stream placed off a 4-byte word faults
  // as misaligned; at the word, the same pack makes the reference stream.
  (void)codec.plan(0, Codec::zero32);
  const residency::PageCodec::Page off_word{page_, stream_at + 2, Codec::zero32, 0};
  ASSERT_TRUE(codec.pack(&off_word, 1, nullptr));
  EXPECT_EQ(api.ctxSynchronize(), CUDA_ERROR_MISALIGNED_ADDRESS);
  EXPECT_EQ(misaligned(), 1U);
  EXPECT_TRUE(untouched());
  clear();
  ASSERT_TRUE(codec.pack(&p, 1, nullptr));
  ASSERT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
  const std::vector<unsigned char> expected = testing::reference_stream(data_, Codec::zero32);
  EXPECT_EQ(std::memcmp(host, expected.data(), expected.size()), 0);

  // Counted over again on a page of zeros, the offsets are 0: on a word
  // but before the payloads, a stray write (illegal address), not a
  // misaligned one.
  std::memset(host, 0xA5, room + 8);
  ASSERT_EQ(api.memsetD8(page_, 0, kPage), CUDA_SUCCESS);
  ASSERT_TRUE(codec.count(&page_, 1, 1, nullptr));
  ASSERT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
  ASSERT_TRUE(codec.pack(&p, 1, nullptr));
  EXPECT_EQ(api.ctxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(access(), 1U);
  EXPECT_EQ(misaligned(), 0U);
  EXPECT_TRUE(untouched());
  clear();
  (void)api.memFreeHost(host);
}

// An unpack reads its stream's prefix to find where each payload lies.
// Where nothing is mapped there, the kernel faults as a GPU's does
// (CUDA_ERROR_ILLEGAL_ADDRESS, sticky), writes nothing, and the process
// lives on.
TEST_F(PageCodecOnSim, AnUnpackWhoseStreamIsNotMappedFaultsAndWritesNothing) {
  const driver::Api& api = testing::sim_driver().api();
  auto unmapped = testing::sim_control<std::uint64_t (*)()>("tidepool_sim_unmapped_faults");
  auto clear = testing::sim_control<void (*)()>("tidepool_sim_clear_faults");
  ASSERT_NE(unmapped, nullptr);
  ASSERT_NE(clear, nullptr);
  ASSERT_NO_FATAL_FAILURE(make_codec_and_page(3));
  residency::PageCodec& codec = *codec_;
  CUdeviceptr nothing_mapped = 0;
  ASSERT_EQ(api.memAddressReserve(&nothing_mapped, kPage, 0, 0, 0), CUDA_SUCCESS);
  clear();

  const residency::PageCodec::Page p{page_, nothing_mapped, Codec::zero32, 0};
  ASSERT_TRUE(codec.unpack(&p, 1, nullptr)) << "the launch is queued; the kernel faults when it runs";
  EXPECT_EQ(api.ctxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(unmapped(), 1U);
  clear();
  std::vector<unsigned char> after(kPage);
  ASSERT_EQ(api.memcpyDtoH(after.data(), page_, kPage), CUDA_SUCCESS);
  EXPECT_EQ(after, data_) << "a faulting unpack writes nothing";
  (void)api.memAddressFree(nothing_mapped, kPage);
}

TEST(ZeroCodecFormat, AStreamIsCheckedBeforeItIsTrusted) {
  constexpr std::size_t kPage = 4 * kernels::kChunkBytes;
  const std::vector<unsigned char> page = testing::page_bytes(testing::PageData::half_zero16, kPage, 3);
  for (const Codec c : {Codec::zero32, Codec::zero16}) {
    std::vector<unsigned char> stream = testing::reference_stream(page, c);
    EXPECT_TRUE(kernels::valid_stream(stream.data(), stream.size(), kPage));
    EXPECT_FALSE(kernels::valid_stream(stream.data(), stream.size() - 4, kPage)) << "truncated";
    EXPECT_FALSE(kernels::valid_stream(stream.data(), stream.size(), kPage * 2)) << "another page size";
    EXPECT_FALSE(kernels::valid_stream(nullptr, stream.size(), kPage));
    std::vector<unsigned char> bad = stream;
    bad[0] ^= 1;  // the magic
    EXPECT_FALSE(kernels::valid_stream(bad.data(), bad.size(), kPage));
    bad = stream;
    bad[kernels::payloads_at(4)] ^= 0x10;  // a mask bit: the payload no longer matches its length
    EXPECT_FALSE(kernels::valid_stream(bad.data(), bad.size(), kPage));
    bad = stream;
    std::uint32_t offset = 0;
    std::memcpy(&offset, bad.data() + kernels::offsets_at() + 8, 4);
    offset += 4;  // chunk 2 starts 4 bytes late
    std::memcpy(bad.data() + kernels::offsets_at() + 8, &offset, 4);
    EXPECT_FALSE(kernels::valid_stream(bad.data(), bad.size(), kPage));
  }
}

TEST(ZeroCodecFormat, TheReferenceUnpackRefusesAPayloadOfTheWrongLengthAndLeavesTheChunk) {
  const std::vector<unsigned char> page = testing::page_bytes(testing::PageData::half_zero32, kernels::kChunkBytes, 9);
  std::vector<unsigned char> payload(kernels::kChunkBytes + 256);
  const std::uint32_t length = kernels::reference_pack(Codec::zero32, page.data(), payload.data());
  std::vector<unsigned char> chunk(kernels::kChunkBytes, 0x77);
  EXPECT_FALSE(kernels::reference_unpack(Codec::zero32, payload.data(), length - 4, chunk.data()));
  EXPECT_EQ(chunk, std::vector<unsigned char>(kernels::kChunkBytes, 0x77));
  ASSERT_TRUE(kernels::reference_unpack(Codec::zero32, payload.data(), length, chunk.data()));
  EXPECT_EQ(chunk, page);
}

// The format read plainly, element by element, as zero_codec.hpp states it:
// whichever path the reference takes (AVX-512 or loops) must give its bytes.
template <typename Element>
std::vector<unsigned char> plain_payload(const unsigned char* chunk) {
  const std::size_t elements = kernels::kChunkBytes / sizeof(Element);
  std::vector<unsigned char> out(elements / 8, 0);
  std::vector<unsigned char> values;
  for (std::size_t i = 0; i < elements; ++i) {
    Element e;
    std::memcpy(&e, chunk + i * sizeof(Element), sizeof(Element));
    if (e == 0) continue;
    out[i / 8] = static_cast<unsigned char>(out[i / 8] | (1U << (i % 8)));
    values.insert(values.end(), chunk + i * sizeof(Element), chunk + (i + 1) * sizeof(Element));
  }
  while (values.size() % 4 != 0) values.push_back(0);
  out.insert(out.end(), values.begin(), values.end());
  return out;
}

TEST(ZeroCodecFormat, TheReferenceWritesTheFormatAsItIsStated) {
  for (const testing::PageData kind :
       {testing::PageData::dense_random, testing::PageData::half_zero32, testing::PageData::half_zero16,
        testing::PageData::all_zero, testing::PageData::sparse_words}) {
    SCOPED_TRACE(testing::page_data_name(kind));
    const std::vector<unsigned char> chunk = testing::page_bytes(kind, kernels::kChunkBytes, 11);
    for (const Codec c : {Codec::zero32, Codec::zero16}) {
      const std::vector<unsigned char> plain =
          c == Codec::zero32 ? plain_payload<std::uint32_t>(chunk.data()) : plain_payload<std::uint16_t>(chunk.data());
      std::vector<unsigned char> payload(kernels::kChunkBytes + 512, 0xEE);
      const std::uint32_t length = kernels::reference_pack(c, chunk.data(), payload.data());
      ASSERT_EQ(length, plain.size());
      EXPECT_TRUE(std::equal(plain.begin(), plain.end(), payload.begin()));
      EXPECT_EQ(payload[length], 0xEE) << "written past the payload";
      std::vector<unsigned char> back(kernels::kChunkBytes, 0x33);
      ASSERT_TRUE(kernels::reference_unpack(c, plain.data(), length, back.data()));
      EXPECT_EQ(back, chunk);
    }
  }
}

TEST(ZeroCodecFormat, SizesFollowTheNonZeroElements) {
  EXPECT_EQ(kernels::payload_bytes(Codec::zero32, 0), 128U);
  EXPECT_EQ(kernels::payload_bytes(Codec::zero32, 1024), 128U + 4096U);
  EXPECT_EQ(kernels::payload_bytes(Codec::zero16, 3), 256U + 8U) << "odd halves pad to 4 bytes";
  const std::vector<unsigned char> zeros(kernels::kChunkBytes, 0);
  EXPECT_EQ(kernels::reference_count(zeros.data()), 0U);
  std::vector<unsigned char> one(kernels::kChunkBytes, 0);
  one[2] = 1;  // the high half of word 0
  EXPECT_EQ(kernels::nonzero_of(kernels::reference_count(one.data()), Codec::zero32), 1U);
  EXPECT_EQ(kernels::nonzero_of(kernels::reference_count(one.data()), Codec::zero16), 1U);
}

}  // namespace
}  // namespace tidepool
