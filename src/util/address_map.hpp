// AddressMap: an open-addressing hash map from an address to a pointer, for
// finding the block that starts at a freed address in O(1).
//
// Linear probing with backward-shift deletion, so there are no tombstones and
// lookups stay short. Capacity is a power of two and the table grows (the only
// allocation) when it is half full, so inserts are amortised O(1) and never
// allocate on the steady-state path. Key 0 is reserved as the empty marker;
// device addresses are never 0. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tidepool::util {

template <typename Value>
class AddressMap {
 public:
  explicit AddressMap(std::size_t initial_capacity = 1024) {
    std::size_t capacity = 16;
    while (capacity < initial_capacity) capacity <<= 1;
    slots_.assign(capacity, Slot{});
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  // Inserts or replaces. `key` must not be 0.
  void insert(std::uintptr_t key, Value* value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    std::size_t i = home(key);
    while (slots_[i].key != 0 && slots_[i].key != key) i = (i + 1) & mask();
    if (slots_[i].key == 0) ++size_;
    slots_[i] = Slot{key, value};
  }

  [[nodiscard]] Value* find(std::uintptr_t key) const noexcept {
    if (key == 0) return nullptr;
    for (std::size_t i = home(key);; i = (i + 1) & mask()) {
      if (slots_[i].key == key) return slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }

  // Removes and returns the value, or nullptr when absent.
  Value* erase(std::uintptr_t key) noexcept {
    if (key == 0) return nullptr;
    std::size_t i = home(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return nullptr;
      i = (i + 1) & mask();
    }
    Value* value = slots_[i].value;
    // Backward-shift: pull later members of the probe run into the hole.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask(); slots_[j].key != 0; j = (j + 1) & mask()) {
      const std::size_t want = home(slots_[j].key);
      const bool movable = hole <= j ? (want <= hole || want > j) : (want <= hole && want > j);
      if (movable) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    return value;
  }

  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.key != 0) f(s.key, s.value);
    }
  }

 private:
  struct Slot {
    std::uintptr_t key = 0;
    Value* value = nullptr;
  };

  [[nodiscard]] std::size_t mask() const noexcept { return slots_.size() - 1; }
  [[nodiscard]] std::size_t home(std::uintptr_t key) const noexcept {
    // Fibonacci hashing: addresses share low zero bits, so mix before masking.
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> 20) & mask();
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot{});
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != 0) insert(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  std::size_t size_ = 0;
};

}  // namespace tidepool::util
