// Zero-value compression of evicted pages: the stream format, and the steps
// on one chunk that both the device kernels (zero_codec.cu) and the simulated
// driver's reference (reference_* below) run.
//
// A page is cut into chunks of kChunkBytes, each coded on its own at one
// granularity: 4-byte words (fp32, int32) or 2-byte halves (fp16, bf16). A
// coded chunk is a bitmask of its elements (a set bit: non-zero), then the
// non-zero elements in order, padded to 4 bytes.
//
// The stream of one page:
//   StreamHeader | uint32 offsets[chunks + 1] | the chunks' payloads
// offsets[i] is where chunk i's payload starts, counted from the stream's
// start, and offsets[chunks] is the stream's length. The count kernel gives
// each chunk's non-zero elements at both granularities; the host chooses the
// codec and writes the header and offsets; the pack kernel then writes every
// chunk at its offset and the unpack kernel reads it back, one thread block
// per chunk, with no chunk waiting for another.
//
// A lossy codec would be one more Codec value with a chunk format of its own
// behind the same header and offsets.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define TIDEPOOL_HD __host__ __device__
#else
#define TIDEPOOL_HD
#endif

namespace tidepool::kernels {

constexpr std::uint32_t kChunkBytes = 4096;
constexpr std::uint32_t kStreamMagic = 0x3143565aU;  // "ZVC1"

enum class Codec : std::uint32_t { raw = 0, zero32 = 1, zero16 = 2 };

struct StreamHeader {
  std::uint32_t magic = kStreamMagic;
  std::uint32_t codec = 0;       // a Codec
  std::uint32_t page_bytes = 0;  // the bytes the stream decodes to: chunks * kChunkBytes
  std::uint32_t chunks = 0;
};
static_assert(sizeof(StreamHeader) == 16);

// One page of a kernel launch.
struct PageTask {
  std::uint64_t device = 0;  // the page in device memory: count and pack read it, unpack writes it
  std::uint64_t stream = 0;  // its stream: pack writes it, unpack reads it
  // Memory the host reads and writes (mapped pinned), payloads_at(chunks)
  // bytes: count writes chunk i's count word at table + 4 * i; the host then
  // writes the stream's prefix (header and offsets) over it, which pack reads
  // its offsets from and copies to the stream's start.
  std::uint64_t table = 0;
  std::uint32_t chunks = 0;
  std::uint32_t codec = 0;  // pack and unpack: a Codec
};
static_assert(sizeof(PageTask) == 32);

// Every kernel's first parameter, passed by value so that a launch needs no
// memory of its own that must outlive it: the pages of the launch, whose
// grid is (chunks, count).
constexpr std::uint32_t kMaxTasks = 64;
struct PageTasks {
  PageTask page[kMaxTasks];
  std::uint32_t count = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(PageTasks) == kMaxTasks * sizeof(PageTask) + 8);

TIDEPOOL_HD constexpr std::uint32_t element_bytes(Codec codec) { return codec == Codec::zero16 ? 2U : 4U; }
TIDEPOOL_HD constexpr std::uint32_t chunk_elements(Codec codec) { return kChunkBytes / element_bytes(codec); }
TIDEPOOL_HD constexpr std::uint32_t mask_words(Codec codec) { return chunk_elements(codec) / 32U; }
// The coded size of a chunk with `nonzero` non-zero elements.
TIDEPOOL_HD constexpr std::uint32_t payload_bytes(Codec codec, std::uint32_t nonzero) {
  return mask_words(codec) * 4U + ((nonzero * element_bytes(codec) + 3U) & ~3U);
}
// The count kernel's word for one chunk: non-zero 4-byte words in the low
// half, non-zero 2-byte halves in the high half.
TIDEPOOL_HD constexpr std::uint32_t count_word(std::uint32_t nonzero32, std::uint32_t nonzero16) {
  return nonzero32 | (nonzero16 << 16);
}
TIDEPOOL_HD constexpr std::uint32_t nonzero_of(std::uint32_t count, Codec codec) {
  return codec == Codec::zero16 ? count >> 16 : count & 0xffffU;
}
TIDEPOOL_HD constexpr std::uint32_t offsets_at() { return sizeof(StreamHeader); }
TIDEPOOL_HD constexpr std::uint32_t payloads_at(std::uint32_t chunks) {
  return static_cast<std::uint32_t>(sizeof(StreamHeader)) + (chunks + 1) * 4U;
}
// The longest stream a page of `chunks` can have: every element non-zero.
TIDEPOOL_HD constexpr std::uint32_t max_stream_bytes(std::uint32_t chunks) {
  return payloads_at(chunks) + chunks * payload_bytes(Codec::zero16, chunk_elements(Codec::zero16));
}

#if !defined(__CUDA_ARCH__)
// --- The host side: planning a stream, and the reference the sim runs. ----

// The stream's length for `codec` from the count words of its chunks.
std::uint64_t stream_bytes(Codec codec, const std::uint32_t* counts, std::uint32_t chunks);
// Writes the header and offsets at the start of `stream` (at least
// payloads_at(chunks) bytes); returns the stream's length.
std::uint32_t write_prefix(Codec codec, const std::uint32_t* counts, std::uint32_t chunks, void* stream);
// Whether `stream` (of `bytes` readable) is a well-formed stream of a page
// of `page_bytes`: the header, the offsets in order and in bounds, each
// payload as long as its mask says. The unpack kernel trusts what this
// accepts; the reference unpack checks it again.
bool valid_stream(const void* stream, std::uint64_t bytes, std::uint64_t page_bytes);

// One chunk, as the kernels treat it.
std::uint32_t reference_count(const void* chunk);
// Writes the chunk's payload to `out`; returns its length.
std::uint32_t reference_pack(Codec codec, const void* chunk, void* out);
// Reads a payload of `bytes` into the chunk; false (the chunk untouched)
// when the payload's length does not match its mask.
bool reference_unpack(Codec codec, const void* payload, std::uint32_t bytes, void* chunk);
#endif

}  // namespace tidepool::kernels
