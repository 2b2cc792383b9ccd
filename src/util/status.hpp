// Status and Result: how every layer below the fronts reports failure.
//
// No exception crosses a layer boundary that a C caller can reach, so the core
// returns a small Status (an error code, the driver's own code where one was
// involved, and a static message) or a Result<T> holding a value or a Status.
// Messages are string literals or otherwise static: building a Status never
// allocates, so it is safe on the fast path and inside hooks.
#pragma once

#include <cstdint>
#include <utility>
#include <variant>

namespace tidepool::util {

enum class Error : std::uint8_t {
  ok = 0,
  out_of_memory,    // the device, the budget or the host could not supply the bytes
  invalid_value,    // a bad argument: unknown pointer, double free, zero size where not allowed
  invalid_handle,   // a stream or event handle the driver does not know (destroyed, bogus)
  other_device,     // a stream of another device's context: that device's pool serves it
  not_supported,    // the driver or device lacks a capability
  not_initialized,  // used before initialisation succeeded
  driver_missing,   // libcuda.so.1 (or the configured path) could not be opened
  driver_error,     // the driver returned an error not mapped to one of the above
  bad_config,       // TIDEPOOL_CONF or an option value could not be parsed
  bad_input,        // malformed external data (a trace line, a snapshot)
  io_error,         // a file could not be read or written
};

const char* error_name(Error error) noexcept;

class [[nodiscard]] Status {
 public:
  constexpr Status() noexcept = default;
  constexpr Status(Error error, const char* message, int driver_code = 0) noexcept
      : error_(error), driver_code_(driver_code), message_(message) {}

  static constexpr Status success() noexcept { return {}; }

  [[nodiscard]] constexpr bool ok() const noexcept { return error_ == Error::ok; }
  constexpr explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] constexpr Error error() const noexcept { return error_; }
  // The CUresult (or other foreign code) behind the error, 0 when none.
  [[nodiscard]] constexpr int driver_code() const noexcept { return driver_code_; }
  [[nodiscard]] constexpr const char* message() const noexcept { return message_ ? message_ : ""; }

 private:
  Error error_ = Error::ok;
  int driver_code_ = 0;
  const char* message_ = nullptr;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : state_(status) {}      // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return std::holds_alternative<T>(state_); }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] Status status() const noexcept { return ok() ? Status::success() : std::get<Status>(state_); }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace tidepool::util
