// The out-of-memory message: wording, suggestions and rate. See oom_message.hpp.
#include "runtime/oom_message.hpp"

#include <cstdarg>
#include <cstdio>

#include "runtime/logging.hpp"

namespace tidepool::runtime {

namespace {

// A line being written into a fixed buffer; what does not fit is cut, and
// the cut shown with "...".
class Line {
 public:
  Line(char* buffer, std::size_t capacity) : buffer_(buffer), capacity_(capacity) { buffer_[0] = '\0'; }
  __attribute__((format(printf, 2, 3))) void add(const char* format, ...) noexcept {
    if (length_ + 1 >= capacity_) return;
    va_list args;
    va_start(args, format);
    const int n = std::vsnprintf(buffer_ + length_, capacity_ - length_, format, args);
    va_end(args);
    if (n < 0) return;
    if (static_cast<std::size_t>(n) >= capacity_ - length_) {
      length_ = capacity_ - 1;
      if (capacity_ > 4) {
        buffer_[capacity_ - 4] = buffer_[capacity_ - 3] = buffer_[capacity_ - 2] = '.';
      }
      return;
    }
    length_ += static_cast<std::size_t>(n);
  }
  // Separates the items of a list: nothing before the first.
  void item(const char* separator) noexcept {
    if (items_++ > 0) add("%s", separator);
  }
  [[nodiscard]] std::size_t length() const noexcept { return length_; }
  [[nodiscard]] int items() const noexcept { return items_; }

 private:
  char* buffer_;
  std::size_t capacity_;
  std::size_t length_ = 0;
  int items_ = 0;
};

// A size in a buffer of its own, for one printf argument.
struct Bytes {
  explicit Bytes(std::uint64_t bytes) noexcept { format_bytes(bytes, text, sizeof text); }
  char text[32];
};

unsigned long long ull(std::uint64_t v) { return static_cast<unsigned long long>(v); }

bool is_power_of_ten(std::uint64_t n) noexcept {
  if (n == 0) return false;
  while (n % 10 == 0) n /= 10;
  return n == 1;
}

void log_line(const char* text, std::size_t length) noexcept {
  try {
    // The string_view overload: spdlog formats nothing, it copies the text.
    logger().log(spdlog::level::warn, spdlog::string_view_t(text, length));
  } catch (...) {
  }
}

}  // namespace

OomVerbosity oom_verbosity(std::uint64_t nth) noexcept {
  if (nth <= kFullMessages) return OomVerbosity::full;
  return is_power_of_ten(nth) ? OomVerbosity::count : OomVerbosity::nothing;
}

const char* format_bytes(std::uint64_t bytes, char* out, std::size_t capacity) noexcept {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof kNames / sizeof kNames[0]) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) {
    std::snprintf(out, capacity, "%llu B", ull(bytes));
  } else {
    std::snprintf(out, capacity, "%.2f %s", value, kNames[unit]);
  }
  return out;
}

void format_oom_message(const OomFigures& f, OomMessage* out) noexcept {
  out->count = 0;
  auto next = [&]() -> Line { return Line(out->lines[out->count], OomMessage::kLineBytes); };
  auto done = [&](const Line& line) { out->lengths[out->count++] = line.length(); };
  const bool limited = f.device_limit < f.device_total;

  // What was asked and the budget it had to fit in.
  Line headline = next();
  headline.add("device %d: out of memory: cannot allocate %s (%llu bytes): %.48s; ", f.device, Bytes(f.requested).text,
               ull(f.requested), f.reason);
  if (limited) {
    headline.add("budget %s (device_limit) of the device's %s", Bytes(f.device_limit).text, Bytes(f.device_total).text);
  } else {
    headline.add("budget: the whole device, %s", Bytes(f.device_total).text);
  }
  done(headline);

  // The pool: what the program holds, what tidepool holds, what of that is
  // free and how much of it one block could use.
  Line pool = next();
  pool.add("device %d: live %s in %llu allocation(s) (held by the program); reserved %s (held by tidepool), of which ",
           f.device, Bytes(f.live_bytes).text, ull(f.live_blocks), Bytes(f.reserved_bytes).text);
  pool.add("%s free in the pool, largest free block %s", Bytes(f.free_bytes).text, Bytes(f.largest_free_block).text);
  done(pool);

  // Memory elsewhere, and how often this has happened.
  Line elsewhere = next();
  elsewhere.add("device %d: ", f.device);
  if (f.eviction) {
    elsewhere.add("evicted to host %s (host cache: %s pinned, bound %s)", Bytes(f.evicted_bytes).text,
                  Bytes(f.host_cache_bytes).text, Bytes(f.host_cache_limit).text);
  } else if (f.eviction_off != nullptr) {
    elsewhere.add("eviction unavailable (%.60s)", f.eviction_off);
  } else {
    elsewhere.add("eviction off");
  }
  elsewhere.add("; allocations passed through to the driver: %llu; failure %llu on this device",
                ull(f.passthrough_allocations), ull(f.failures));
  done(elsewhere);

  // What to try, the likeliest first: settings on one line, what the
  // program can do on the next (one line would not hold them all).
  Line settings = next();
  settings.add("device %d: to try: ", f.device);
  if (f.requested > f.device_total) {
    // Nothing else can help.
    settings.add("no setting makes room for more than the whole device (%s): split the allocation",
                 Bytes(f.device_total).text);
    done(settings);
  } else {
    if (limited) {
      settings.item("; ");
      settings.add("raise device_limit (the device has %s)", Bytes(f.device_total).text);
    }
    if (f.eviction && f.host_cache_full > 0) {
      settings.item("; ");
      settings.add("raise host_cache (full at %s)", Bytes(f.host_cache_limit).text);
    } else if (!f.eviction && f.eviction_off == nullptr && f.vmm) {
      settings.item("; ");
      settings.add("evict:on with a host_cache, to move idle blocks to host memory");
    }
    const bool any_setting = settings.items() > 0;
    if (any_setting) done(settings);  // else the next line takes its buffer
    Line program = next();
    program.add("device %d: %s", f.device, any_setting ? "or in the program: " : "to try: ");
    program.add("free what is no longer needed or use a smaller batch");
    if (f.free_bytes >= f.requested && f.largest_free_block < f.requested) {
      program.add("; fragmented: compare policies on a recorded trace (trace:PATH, tidepool-replay --policy all)");
    }
    done(program);
  }

  if (f.failures == kFullMessages) {
    Line rate = next();
    rate.add("device %d: later out-of-memory failures are only counted, in one line at the 10th, 100th, 1000th, ...",
             f.device);
    done(rate);
  }
}

std::size_t format_oom_count(const OomFigures& f, char* out, std::size_t capacity) noexcept {
  Line line(out, capacity);
  line.add("device %d: out of memory again: %llu allocations have failed on this device; the last asked for %s ",
           f.device, ull(f.failures), Bytes(f.requested).text);
  line.add("with %s live, %s reserved, budget %s", Bytes(f.live_bytes).text, Bytes(f.reserved_bytes).text,
           Bytes(f.device_limit).text);
  return line.length();
}

void log_out_of_memory(const OomFigures& f) noexcept {
  switch (oom_verbosity(f.failures)) {
    case OomVerbosity::full: {
      OomMessage message;
      format_oom_message(f, &message);
      for (std::size_t i = 0; i < message.count; ++i) log_line(message.lines[i], message.lengths[i]);
      break;
    }
    case OomVerbosity::count: {
      char line[OomMessage::kLineBytes];
      log_line(line, format_oom_count(f, line, sizeof line));
      break;
    }
    case OomVerbosity::nothing: break;
  }
}

}  // namespace tidepool::runtime
