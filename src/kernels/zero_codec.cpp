// See zero_codec.hpp. Built into libtidepool (planning streams) and into the
// simulated driver (the reference of the kernels, which it runs by name).
#include "kernels/zero_codec.hpp"

#include <immintrin.h>

#include <bit>
#include <cstdlib>
#include <cstring>

namespace tidepool::kernels {

namespace {

// The reference runs on the sim's stream workers in place of a GPU, so it is
// written to be quick on a CPU: whole chunks copied to aligned locals, masks
// built 32 elements at a time and elements compacted without a branch.
template <typename Element>
struct Chunk {
  static constexpr std::uint32_t kElements = kChunkBytes / sizeof(Element);
  static constexpr std::uint32_t kMasks = kElements / 32;
};

template <typename Element>
std::uint32_t pack_as(const void* chunk, void* out) {
  using C = Chunk<Element>;
  alignas(64) Element in[C::kElements];
  std::memcpy(in, chunk, kChunkBytes);
  alignas(64) std::uint32_t masks[C::kMasks];
  alignas(64) Element values[C::kElements + 1];
  std::uint32_t nonzero = 0;
  for (std::uint32_t word = 0; word < C::kMasks; ++word) {
    std::uint32_t bits = 0;
    const Element* group = in + word * 32;
    for (std::uint32_t i = 0; i < 32; ++i) bits |= static_cast<std::uint32_t>(group[i] != 0) << i;
    masks[word] = bits;
    for (std::uint32_t i = 0; i < 32; ++i) {
      values[nonzero] = group[i];
      nonzero += group[i] != 0 ? 1U : 0U;
    }
  }
  const std::uint32_t written = nonzero * static_cast<std::uint32_t>(sizeof(Element));
  const std::uint32_t padded = (written + 3U) & ~3U;
  if (padded > written) values[nonzero] = 0;  // the padding is zero
  auto* bytes = static_cast<unsigned char*>(out);
  std::memcpy(bytes, masks, sizeof(masks));
  std::memcpy(bytes + sizeof(masks), values, padded);
  return static_cast<std::uint32_t>(sizeof(masks)) + padded;
}

template <typename Element>
bool unpack_as(const void* payload, std::uint32_t bytes, void* chunk) {
  using C = Chunk<Element>;
  if (bytes < C::kMasks * 4) return false;
  alignas(64) std::uint32_t masks[C::kMasks];
  std::memcpy(masks, payload, sizeof(masks));
  std::uint32_t nonzero = 0;
  for (const std::uint32_t m : masks) nonzero += static_cast<std::uint32_t>(std::popcount(m));
  const Codec codec = sizeof(Element) == 2 ? Codec::zero16 : Codec::zero32;
  if (bytes != payload_bytes(codec, nonzero)) return false;
  alignas(64) Element values[C::kElements + 1];
  std::memcpy(values, static_cast<const unsigned char*>(payload) + sizeof(masks), nonzero * sizeof(Element));
  values[nonzero] = 0;  // read for the zero elements past the last value, never kept
  alignas(64) Element out[C::kElements];
  std::uint32_t next = 0;
  for (std::uint32_t word = 0; word < C::kMasks; ++word) {
    const std::uint32_t bits = masks[word];
    for (std::uint32_t i = 0; i < 32; ++i) {
      const std::uint32_t set = (bits >> i) & 1U;
      out[word * 32 + i] = static_cast<Element>(values[next] * set);  // no branch on the data
      next += set;
    }
  }
  std::memcpy(chunk, out, kChunkBytes);
  return true;
}

// 4-byte elements with AVX-512: a mask of 16 words from one compare, the
// non-zero ones compressed into place (vpcompressd) and expanded back
// (vpexpandd). The same bytes as the loops above (zero_codec_test holds
// the two to it); chosen at run time where the CPU has it.
__attribute__((target("avx512f"))) std::uint32_t pack32_avx512(const void* chunk, void* out) {
  constexpr std::uint32_t kMasks = kChunkBytes / 4 / 32;
  const auto* in = static_cast<const std::uint32_t*>(chunk);
  // Compressed in registers and stored whole into locals with room to
  // spare (a compressing store to memory is slow on many CPUs), then copied
  // out at their length.
  alignas(64) std::uint32_t masks[kMasks];
  alignas(64) std::uint32_t values[kChunkBytes / 4 + 16];
  std::uint32_t nonzero = 0;
  for (std::uint32_t word = 0; word < kMasks; ++word) {
    const __m512i low = _mm512_loadu_si512(in + word * 32);
    const __m512i high = _mm512_loadu_si512(in + word * 32 + 16);
    const __mmask16 low_set = _mm512_test_epi32_mask(low, low);
    const __mmask16 high_set = _mm512_test_epi32_mask(high, high);
    _mm512_storeu_si512(values + nonzero, _mm512_maskz_compress_epi32(low_set, low));
    nonzero += static_cast<std::uint32_t>(std::popcount(static_cast<unsigned>(low_set)));
    _mm512_storeu_si512(values + nonzero, _mm512_maskz_compress_epi32(high_set, high));
    nonzero += static_cast<std::uint32_t>(std::popcount(static_cast<unsigned>(high_set)));
    masks[word] = static_cast<std::uint32_t>(low_set) | (static_cast<std::uint32_t>(high_set) << 16);
  }
  auto* bytes = static_cast<unsigned char*>(out);
  std::memcpy(bytes, masks, sizeof(masks));
  std::memcpy(bytes + sizeof(masks), values, nonzero * 4);
  return kMasks * 4 + nonzero * 4;
}

__attribute__((target("avx512f"))) void unpack32_avx512(const void* payload, void* chunk) {
  constexpr std::uint32_t kMasks = kChunkBytes / 4 / 32;
  const auto* masks = static_cast<const unsigned char*>(payload);
  const auto* values = reinterpret_cast<const std::uint32_t*>(masks + kMasks * 4);
  auto* out = static_cast<std::uint32_t*>(chunk);
  std::uint32_t next = 0;
  for (std::uint32_t word = 0; word < kMasks; ++word) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, masks + word * 4, 4);
    const auto low_set = static_cast<__mmask16>(bits & 0xffffU);
    const auto high_set = static_cast<__mmask16>(bits >> 16);
    _mm512_storeu_si512(out + word * 32, _mm512_maskz_expandloadu_epi32(low_set, values + next));
    next += static_cast<std::uint32_t>(std::popcount(bits & 0xffffU));
    _mm512_storeu_si512(out + word * 32 + 16, _mm512_maskz_expandloadu_epi32(high_set, values + next));
    next += static_cast<std::uint32_t>(std::popcount(bits >> 16));
  }
}

bool use_avx512() {
  static const bool has = [] {
    if (const char* off = ::secure_getenv("TIDEPOOL_SIM_SCALAR_CODEC"); off != nullptr && *off == '1') return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

}  // namespace

std::uint64_t stream_bytes(Codec codec, const std::uint32_t* counts, std::uint32_t chunks) {
  std::uint64_t bytes = payloads_at(chunks);
  for (std::uint32_t i = 0; i < chunks; ++i) bytes += payload_bytes(codec, nonzero_of(counts[i], codec));
  return bytes;
}

std::uint32_t write_prefix(Codec codec, const std::uint32_t* counts, std::uint32_t chunks, void* stream) {
  StreamHeader header;
  header.codec = static_cast<std::uint32_t>(codec);
  header.page_bytes = chunks * kChunkBytes;
  header.chunks = chunks;
  auto* bytes = static_cast<unsigned char*>(stream);
  std::memcpy(bytes, &header, sizeof(header));
  std::uint32_t at = payloads_at(chunks);
  for (std::uint32_t i = 0; i <= chunks; ++i) {
    std::memcpy(bytes + offsets_at() + i * 4U, &at, sizeof(at));
    if (i < chunks) at += payload_bytes(codec, nonzero_of(counts[i], codec));
  }
  return at;
}

bool valid_stream(const void* stream, std::uint64_t bytes, std::uint64_t page_bytes) {
  StreamHeader header;
  if (stream == nullptr || bytes < sizeof(header)) return false;
  std::memcpy(&header, stream, sizeof(header));
  const auto codec = static_cast<Codec>(header.codec);
  if (header.magic != kStreamMagic || (codec != Codec::zero32 && codec != Codec::zero16) ||
      header.page_bytes != page_bytes || static_cast<std::uint64_t>(header.chunks) * kChunkBytes != page_bytes ||
      bytes < payloads_at(header.chunks)) {
    return false;
  }
  const auto* base = static_cast<const unsigned char*>(stream);
  std::uint32_t previous = 0;
  for (std::uint32_t i = 0; i <= header.chunks; ++i) {
    std::uint32_t at = 0;
    std::memcpy(&at, base + offsets_at() + i * 4U, sizeof(at));
    if (i == 0 ? at != payloads_at(header.chunks) : at < previous || at > bytes) return false;
    if (i > 0) {
      const std::uint32_t length = at - previous;
      const std::uint32_t masks = mask_words(codec);
      if (length < masks * 4U) return false;
      std::uint32_t nonzero = 0;
      for (std::uint32_t w = 0; w < masks; ++w) {
        std::uint32_t m = 0;
        std::memcpy(&m, base + previous + w * 4U, sizeof(m));
        nonzero += static_cast<std::uint32_t>(std::popcount(m));
      }
      if (length != payload_bytes(codec, nonzero)) return false;
    }
    previous = at;
  }
  return previous == bytes;
}

std::uint32_t reference_count(const void* chunk) {
  alignas(64) std::uint32_t words[kChunkBytes / 4];
  std::memcpy(words, chunk, kChunkBytes);
  std::uint32_t nonzero32 = 0;
  std::uint32_t nonzero16 = 0;
  for (const std::uint32_t w : words) {
    nonzero32 += w != 0 ? 1U : 0U;
    nonzero16 += ((w & 0xffffU) != 0 ? 1U : 0U) + ((w >> 16) != 0 ? 1U : 0U);
  }
  return count_word(nonzero32, nonzero16);
}

std::uint32_t reference_pack(Codec codec, const void* chunk, void* out) {
  if (codec == Codec::zero16) return pack_as<std::uint16_t>(chunk, out);
  return use_avx512() ? pack32_avx512(chunk, out) : pack_as<std::uint32_t>(chunk, out);
}

bool reference_unpack(Codec codec, const void* payload, std::uint32_t bytes, void* chunk) {
  if (codec == Codec::zero16) return unpack_as<std::uint16_t>(payload, bytes, chunk);
  if (codec != Codec::zero32) return false;
  if (!use_avx512()) return unpack_as<std::uint32_t>(payload, bytes, chunk);
  constexpr std::uint32_t kMasks = kChunkBytes / 4 / 32;
  if (bytes < kMasks * 4) return false;
  std::uint32_t nonzero = 0;
  for (std::uint32_t w = 0; w < kMasks; ++w) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, static_cast<const unsigned char*>(payload) + w * 4, 4);
    nonzero += static_cast<std::uint32_t>(std::popcount(bits));
  }
  if (bytes != payload_bytes(Codec::zero32, nonzero)) return false;
  unpack32_avx512(payload, chunk);
  return true;
}

}  // namespace tidepool::kernels
