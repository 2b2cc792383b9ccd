// TraceRecorder: the ring, the writer thread and the file (see the header).
#include "runtime/trace_recorder.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <string_view>

#include "runtime/call_sites.hpp"
#include "runtime/gzip_members.hpp"
#include "runtime/logging.hpp"
#include "util/util.hpp"

namespace tidepool::runtime {

namespace {

constexpr auto kDrainInterval = std::chrono::milliseconds(5);
constexpr std::size_t kLineBytes = kMaxTraceLineBytes;
// How long flush() waits for an event that was claimed but not yet published.
constexpr auto kPublishPatience = std::chrono::milliseconds(200);

// Bumped in every child after fork(): a recorder made in another generation
// belongs to the parent and stays silent here.
std::atomic<std::uint64_t> g_fork_generation{0};

void on_fork_child() { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }

std::once_flag g_atfork_once;

// The kernel's thread id, as RMM's logs show it; read once per thread.
std::uint64_t thread_id() noexcept {
  thread_local std::uint64_t id = 0;
  if (id == 0) id = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  return id;
}

}  // namespace

TraceRecorder::Slot* TraceRecorder::map_slots() {
  void* mapped = ::mmap(nullptr, kCapacity * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  auto* slots = static_cast<Slot*>(mapped);
  for (std::size_t i = 0; i < kCapacity; ++i) new (&slots[i]) Slot();
  return slots;
}

void TraceRecorder::SlotsUnmap::operator()(Slot* slots) const noexcept {
  // Slot is trivially destructible but for its atomic, which needs nothing either.
  ::munmap(slots, kCapacity * sizeof(Slot));
}

util::Result<std::unique_ptr<TraceRecorder>> TraceRecorder::open(
    const std::string& path, std::optional<std::chrono::steady_clock::time_point> continue_from,
    const CallSites* call_sites) {
  std::call_once(g_atfork_once, [] { ::pthread_atfork(nullptr, nullptr, &on_fork_child); });
  // zlib first: a .gz trace that cannot be compressed creates no file.
  std::unique_ptr<GzipMembers> gzip;
  if (GzipMembers::wanted_for(path)) {
    auto made = GzipMembers::create(kBufferBytes);
    if (!made) return made.status();
    gzip = std::move(made.value());
  }
  auto opened = util::open_output_file(path, continue_from ? util::OutputMode::append : util::OutputMode::truncate);
  if (!opened) return opened.status();
  const int fd = opened.value();
  const bool empty = ::lseek(fd, 0, SEEK_END) == 0;
  std::unique_ptr<TraceRecorder> recorder(new TraceRecorder(
      fd, path, continue_from.value_or(std::chrono::steady_clock::now()), std::move(gzip), call_sites));
  std::string header(kTraceHeader);
  header += '\n';
  if (empty && !recorder->write_text(header)) {
    return util::Status(util::Error::io_error, std::strerror(errno));  // the recorder closes the file
  }
  return recorder;
}

TraceRecorder::TraceRecorder(int fd, std::string path, std::chrono::steady_clock::time_point start,
                             std::unique_ptr<GzipMembers> gzip, const CallSites* call_sites)
    : fd_(fd),
      path_(std::move(path)),
      gzip_(std::move(gzip)),
      fork_generation_(g_fork_generation.load(std::memory_order_relaxed)),
      start_(start),
      slots_(map_slots()),
      buffer_(new char[kBufferBytes]),
      call_sites_(call_sites),
      owner_names_(CallSites::kTags) {
  for (std::size_t i = 0; i < kCapacity; ++i) slots_[i].turn.store(i, std::memory_order_relaxed);
  writer_ = util::start_background_thread([this] { run(); });
}

TraceRecorder::~TraceRecorder() {
  if (!active()) {
    // A forked child: the writer thread exists only in the parent.
    if (writer_.joinable()) writer_.detach();
    ::close(fd_);
    return;
  }
  finish();
  ::close(fd_);
}

bool TraceRecorder::active() const noexcept {
  return fork_generation_ == g_fork_generation.load(std::memory_order_relaxed);
}

void TraceRecorder::record(TraceAction action, std::uintptr_t pointer, std::size_t size, std::uintptr_t stream,
                           std::uint16_t owner) noexcept {
  if (!active() || abandoned_.load(std::memory_order_relaxed)) return;
  const std::uint64_t sequence = head_.fetch_add(1, std::memory_order_acq_rel);
  const auto now = std::chrono::steady_clock::now();
  Slot& slot = slots_[sequence & (kCapacity - 1)];
  if (slot.turn.load(std::memory_order_acquire) != sequence && !wait_for_slot(slot, sequence)) return;
  slot.thread = thread_id();
  slot.time_us =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - start_).count());
  slot.action = action;
  slot.pointer = pointer;
  slot.size = size;
  slot.stream = stream;
  slot.owner = owner;
  slot.turn.store(sequence + 1, std::memory_order_release);
  if (write_through_.load(std::memory_order_relaxed)) flush(/*may_name=*/false);
}

// The ring is full: this slot still holds an event kCapacity older. Help the
// writer rather than wait on it (it may be gone, after finish()).
bool TraceRecorder::wait_for_slot(Slot& slot, std::uint64_t sequence) noexcept {
  while (slot.turn.load(std::memory_order_acquire) != sequence) {
    if (abandoned_.load(std::memory_order_relaxed)) return false;  // the trace has ended: nobody drains
    {
      std::unique_lock<std::mutex> lock(drain_lock_, std::try_to_lock);
      if (lock.owns_lock()) drain_locked(0);
    }
    if (slot.turn.load(std::memory_order_acquire) == sequence) return true;
    // The oldest event is claimed but not yet published, or another thread
    // is draining: let it run.
    std::this_thread::yield();
  }
  return true;
}

void TraceRecorder::flush() noexcept { flush(/*may_name=*/true); }

void TraceRecorder::flush(bool may_name) noexcept {
  if (!active() || abandoned_.load(std::memory_order_relaxed)) return;
  if (may_name) name_new_owners();
  std::lock_guard<std::mutex> lock(drain_lock_);
  drain_locked(head_.load(std::memory_order_acquire));
  write_out();
}

void TraceRecorder::name_new_owners(std::optional<std::chrono::steady_clock::time_point> give_up_at) noexcept {
  if (call_sites_ == nullptr) return;
  std::unique_lock<std::mutex> lock(naming_lock_, std::defer_lock);
  if (!give_up_at) {
    lock.lock();
  } else if (!util::try_lock_until(lock, *give_up_at)) {
    return;  // a thread interrupted while naming holds it: the names known so far
  }
  std::size_t named = named_.load(std::memory_order_relaxed);
  const std::size_t given = call_sites_->count();
  for (; named < given; ++named) {
    try {
      owner_names_[named] = owner_text(CallSites::library_of(call_sites_->caller(static_cast<std::uint16_t>(named))));
    } catch (...) {
      owner_names_[named].clear();  // out of memory: this owner goes without its name
    }
    named_.store(named + 1, std::memory_order_release);
  }
}

void TraceRecorder::finish() noexcept {
  if (!active()) return;
  {
    std::lock_guard<std::mutex> lock(wake_lock_);
    stop_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable() && writer_.get_id() != std::this_thread::get_id()) writer_.join();
  write_through_.store(true, std::memory_order_relaxed);
  name_new_owners(std::chrono::steady_clock::now() + kFinishWait);
  // Never waits forever: at exit, a signal handler may have interrupted the
  // thread that holds the drain lock (a producer helping a full ring). Then
  // the trace ends here, and later events are dropped rather than wait.
  std::unique_lock<std::mutex> lock(drain_lock_, std::defer_lock);
  if (!util::try_lock_until(lock, std::chrono::steady_clock::now() + kFinishWait)) {
    abandoned_.store(true, std::memory_order_relaxed);
    log_warn("the trace '{}' could not be flushed at exit: its writer was interrupted; it ends early", path_);
    return;
  }
  drain_locked(head_.load(std::memory_order_acquire));
  write_out();
}

void TraceRecorder::run() {
  std::unique_lock<std::mutex> wake(wake_lock_);
  while (!stop_) {
    wake_.wait_for(wake, kDrainInterval);
    if (stop_) break;
    wake.unlock();
    // Names first, outside the drain lock; an event whose tag was given
    // after that stops the drain until it is named too.
    for (bool unnamed = true; unnamed;) {
      name_new_owners();
      std::lock_guard<std::mutex> lock(drain_lock_);
      unnamed = drain_locked(0, /*stop_at_unnamed=*/true);
      write_out();
    }
    wake.lock();
  }
}

bool TraceRecorder::drain_locked(std::uint64_t until, bool stop_at_unnamed) noexcept {
  const auto deadline = std::chrono::steady_clock::now() + kPublishPatience;
  const std::size_t named = named_.load(std::memory_order_acquire);
  for (;;) {
    Slot& slot = slots_[tail_ & (kCapacity - 1)];
    if (slot.turn.load(std::memory_order_acquire) != tail_ + 1) {
      // Not yet published. A flush waits, briefly, for events claimed before it.
      if (tail_ >= until || std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
      continue;
    }
    if (stop_at_unnamed && slot.owner >= named && slot.owner < owner_names_.size()) return true;
    TraceEvent event;
    event.thread = slot.thread;
    event.time_us = slot.time_us;
    event.action = slot.action;
    event.pointer = slot.pointer;
    event.size = slot.size;
    event.stream = slot.stream;
    const std::string_view owner = slot.owner < named ? std::string_view(owner_names_[slot.owner]) : std::string_view();
    slot.turn.store(tail_ + kCapacity, std::memory_order_release);
    ++tail_;
    // Threads read the clock after claiming their sequence, so neighbours can
    // be a microsecond out of order; the file's times never go backwards.
    event.time_us = std::max(event.time_us, last_time_us_);
    last_time_us_ = event.time_us;
    if (kBufferBytes - buffered_ < kLineBytes) write_out();
    buffered_ += format_trace_line(event, owner, buffer_.get() + buffered_, kLineBytes);
    ++buffered_events_;
  }
}

void TraceRecorder::write_out() noexcept {
  if (buffered_ == 0) return;
  if (!write_failed_) {
    if (write_text(std::string_view(buffer_.get(), buffered_))) {
      written_.fetch_add(buffered_events_, std::memory_order_relaxed);
    } else {
      write_failed_ = true;
      log_error("cannot write the trace to '{}': {}; the trace ends here", path_, std::strerror(errno));
    }
  }
  buffered_ = 0;
  buffered_events_ = 0;
}

bool TraceRecorder::write_text(std::string_view text) noexcept {
  return gzip_ != nullptr ? gzip_->write(fd_, text) : util::write_all(fd_, text);
}

}  // namespace tidepool::runtime
