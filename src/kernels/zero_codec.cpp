// See zero_codec.hpp. Built into libtidepool (planning streams) and into the
// simulated driver (the reference of the kernels, which it runs by name).
#include "kernels/zero_codec.hpp"

#include <bit>
#include <cstring>

namespace tidepool::kernels {

namespace {

template <typename Element>
std::uint32_t pack_as(const void* chunk, void* out) {
  constexpr std::uint32_t kElements = kChunkBytes / sizeof(Element);
  auto* mask = static_cast<std::uint32_t*>(out);
  auto* values = static_cast<unsigned char*>(out) + kElements / 8;
  const auto* in = static_cast<const unsigned char*>(chunk);
  std::uint32_t nonzero = 0;
  for (std::uint32_t word = 0; word < kElements / 32; ++word) {
    std::uint32_t bits = 0;
    for (std::uint32_t i = 0; i < 32; ++i) {
      Element e;
      std::memcpy(&e, in + (word * 32 + i) * sizeof(Element), sizeof(Element));
      if (e == 0) continue;
      bits |= 1U << i;
      std::memcpy(values + nonzero * sizeof(Element), &e, sizeof(Element));
      ++nonzero;
    }
    mask[word] = bits;
  }
  const std::uint32_t written = nonzero * static_cast<std::uint32_t>(sizeof(Element));
  const std::uint32_t padded = (written + 3U) & ~3U;
  std::memset(values + written, 0, padded - written);
  return kElements / 8 + padded;
}

template <typename Element>
bool unpack_as(const void* payload, std::uint32_t bytes, void* chunk) {
  constexpr std::uint32_t kElements = kChunkBytes / sizeof(Element);
  if (bytes < kElements / 8) return false;
  std::uint32_t masks[kElements / 32];
  std::memcpy(masks, payload, sizeof(masks));
  std::uint32_t nonzero = 0;
  for (const std::uint32_t m : masks) nonzero += static_cast<std::uint32_t>(std::popcount(m));
  const Codec codec = sizeof(Element) == 2 ? Codec::zero16 : Codec::zero32;
  if (bytes != payload_bytes(codec, nonzero)) return false;
  const auto* values = static_cast<const unsigned char*>(payload) + kElements / 8;
  auto* out = static_cast<unsigned char*>(chunk);
  std::uint32_t next = 0;
  for (std::uint32_t i = 0; i < kElements; ++i) {
    Element e = 0;
    if ((masks[i / 32] >> (i % 32)) & 1U) std::memcpy(&e, values + (next++) * sizeof(Element), sizeof(Element));
    std::memcpy(out + i * sizeof(Element), &e, sizeof(Element));
  }
  return true;
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
  const auto* in = static_cast<const unsigned char*>(chunk);
  std::uint32_t nonzero32 = 0;
  std::uint32_t nonzero16 = 0;
  for (std::uint32_t at = 0; at < kChunkBytes; at += 4) {
    std::uint16_t low = 0;
    std::uint16_t high = 0;
    std::memcpy(&low, in + at, 2);
    std::memcpy(&high, in + at + 2, 2);
    nonzero16 += (low != 0 ? 1U : 0U) + (high != 0 ? 1U : 0U);
    nonzero32 += (low != 0 || high != 0) ? 1U : 0U;
  }
  return count_word(nonzero32, nonzero16);
}

std::uint32_t reference_pack(Codec codec, const void* chunk, void* out) {
  return codec == Codec::zero16 ? pack_as<std::uint16_t>(chunk, out) : pack_as<std::uint32_t>(chunk, out);
}

bool reference_unpack(Codec codec, const void* payload, std::uint32_t bytes, void* chunk) {
  if (codec == Codec::zero16) return unpack_as<std::uint16_t>(payload, bytes, chunk);
  if (codec == Codec::zero32) return unpack_as<std::uint32_t>(payload, bytes, chunk);
  return false;
}

}  // namespace tidepool::kernels
