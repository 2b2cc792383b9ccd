// tidepool: the C++ API, a thin RAII layer over tidepool.h.
//
//   tidepool::Buffer buf(1 << 20);            // device 0, cudaMalloc semantics
//   tidepool::Buffer staged(n, 0, stream);    // stream-ordered on `stream`
//   kernel<<<...>>>(buf.data());
//   auto stats = tidepool::stats();
//
// Errors throw tidepool::Error (a std::runtime_error carrying the status);
// nothing here crosses a C boundary, so exceptions are safe.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "tidepool/tidepool.h"

namespace tidepool {

class Error : public std::runtime_error {
 public:
  explicit Error(tidepool_status status, const std::string& what)
      : std::runtime_error(what + ": " + tidepool_status_string(status)), status_(status) {}
  [[nodiscard]] tidepool_status status() const noexcept { return status_; }

 private:
  tidepool_status status_;
};

inline void check(tidepool_status status, const char* what) {
  if (status != TIDEPOOL_OK) throw Error(status, what);
}

// Owns one device allocation; frees it (in stream order when it was made so)
// when destroyed. Movable, not copyable.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t size, int device = 0) : size_(size) {
    check(tidepool_malloc(&ptr_, size, device), "tidepool_malloc");
  }
  Buffer(std::size_t size, int device, void* stream) : size_(size), stream_(stream), ordered_(true) {
    check(tidepool_malloc_async(&ptr_, size, device, stream), "tidepool_malloc_async");
  }
  Buffer(Buffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), size_(other.size_), stream_(other.stream_), ordered_(other.ordered_) {}
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      size_ = other.size_;
      stream_ = other.stream_;
      ordered_ = other.ordered_;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset() noexcept {
    if (ptr_ == nullptr) return;
    if (ordered_) {
      (void)tidepool_free_async(ptr_, stream_);
    } else {
      (void)tidepool_free(ptr_);
    }
    ptr_ = nullptr;
  }

  [[nodiscard]] void* data() const noexcept { return ptr_; }
  template <typename T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  void* stream_ = nullptr;
  bool ordered_ = false;
};

inline tidepool_stats stats(int device = 0) {
  tidepool_stats s{};
  check(tidepool_get_stats(device, &s), "tidepool_get_stats");
  return s;
}

inline void write_report(const std::string& path) { check(tidepool_report(path.c_str()), "tidepool_report"); }

inline void set_device_limit(int device, std::size_t bytes) {
  check(tidepool_set_device_limit(device, bytes), "tidepool_set_device_limit");
}

inline std::size_t trim(int device = 0) {
  std::size_t released = 0;
  check(tidepool_trim(device, &released), "tidepool_trim");
  return released;
}

}  // namespace tidepool
