// CallSites: who asked for memory, as the return addresses of the calls that
// allocated it (the hook's caller: PyTorch's allocator, cuBLAS's static
// cudart, NCCL, the program itself), each given a small tag the pool counts
// by (pool/owner_bytes.hpp).
//
// tag() is on the hot path: a hash of the address and, almost always, one
// load and compare in a fixed open-addressed table; a new address claims a
// slot with one compare-and-swap. No heap, no lock, no symbol lookup. Names
// come later, off the hot path: describe() resolves an address with dladdr
// to its library and, where symbols allow, its function, and owner_kind()
// sorts libraries into the owners a reader asks about (the framework,
// cuBLAS, cuDNN, NCCL, ...). Past kTags distinct callers, new ones share
// tag 0 with the callers that are not known at all.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tidepool::runtime {

// A caller resolved: the library (its file's base name, or the program's)
// and the function, demangled, when the library exports or keeps its symbol.
struct CallerName {
  std::string library;        // empty: no loaded object holds the address
  std::string function;       // empty: no symbol covers it
  std::uintptr_t offset = 0;  // the address less the library's load address
  bool program = false;       // the executable itself, not a shared library
};

class CallSites {
 public:
  static constexpr std::size_t kTags = 256;  // tags 1..255 name callers; 0 is "not known"

  // The tag of `caller` (a return address; 0: not known), claiming one for
  // an address not seen before.
  std::uint16_t tag(std::uintptr_t caller) noexcept {
    const Slot& first = slots_[hash(caller)];
    if (caller != 0 && first.caller.load(std::memory_order_acquire) == caller) [[likely]] {
      const std::uint16_t t = first.tag.load(std::memory_order_acquire);
      if (t != kUnpublished) [[likely]]
        return t;
    }
    return caller == 0 ? 0 : find_or_claim(caller);
  }
  // The return address tag `t` stands for; 0 for tag 0 and tags not given.
  [[nodiscard]] std::uintptr_t caller(std::uint16_t t) const noexcept {
    return t < kTags ? callers_[t].load(std::memory_order_acquire) : 0;
  }
  // Tags given so far, 0 included (tags are given in order).
  [[nodiscard]] std::size_t count() const noexcept {
    const std::size_t n = next_tag_.load(std::memory_order_acquire);
    return n < kTags ? n : kTags;
  }

  // The library and function holding `caller`. Asks the dynamic loader (and
  // so takes its lock): never on the hot path, never under a lock that an
  // allocating thread may wait for.
  static CallerName describe(std::uintptr_t caller);
  // Only the library's file name (no symbol, no demangling), read from
  // /proc/self/maps: the mapped file, so a symlinked library shows its
  // target's name where describe() shows the name it was loaded by. It takes
  // no lock of the dynamic loader, so the trace writer thread can name
  // owners while another thread is inside dlclose (which holds that lock
  // while it joins the writer).
  static std::string library_of(std::uintptr_t caller);
  // What a reader calls the owner of memory a library asked for: "framework"
  // (PyTorch, TensorFlow, JAX, Caffe, ...), "cuBLAS", "cuDNN", "NCCL", "CUDA
  // library" (cuFFT, cuSPARSE, ...), "CUDA runtime", "tidepool" (its C API
  // called from inside itself), "program" (the executable: `is_program`, or
  // a name without ".so"), or "other".
  static std::string_view owner_kind(std::string_view library, bool is_program);

 private:
  // A power of two; half full at most, since a caller past the last tag
  // claims no slot.
  static constexpr std::size_t kSlots = 2 * kTags;
  struct alignas(16) Slot {
    std::atomic<std::uintptr_t> caller{0};
    std::atomic<std::uint16_t> tag{kUnpublished};
  };
  static constexpr std::uint16_t kUnpublished = 0xffff;

  static std::size_t hash(std::uintptr_t caller) noexcept {
    return static_cast<std::size_t>((caller * 0x9e3779b97f4a7c15ULL) >> 40) & (kSlots - 1);
  }
  // Probes from the address's slot: its tag, or a new one in the first
  // empty slot.
  std::uint16_t find_or_claim(std::uintptr_t caller) noexcept;
  // The slot's tag once its claimer has published it (a few instructions
  // after the claim; a bounded wait, then "not known").
  static std::uint16_t published_tag(const Slot& slot) noexcept;

  std::array<Slot, kSlots> slots_{};
  std::array<std::atomic<std::uintptr_t>, kTags> callers_{};
  std::atomic<std::size_t> next_tag_{1};
};

}  // namespace tidepool::runtime
