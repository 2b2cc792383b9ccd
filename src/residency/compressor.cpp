// See compressor.hpp.
#include "residency/compressor.hpp"

#include <algorithm>

namespace tidepool::residency {

using kernels::Codec;

util::Result<std::unique_ptr<Compressor>> Compressor::create(const driver::Driver& driver, CUcontext context,
                                                             int device, HostCache& cache, CompressMode mode) {
  if (mode == CompressMode::off) return util::Status(util::Error::invalid_value, "compression is off");
  auto codec = PageCodec::create(driver, context, cache.page_size());
  if (!codec) return codec.status();
  auto store = CompressedStore::create(driver, context, device, cache);
  if (!store) return store.status();
  const driver::Api& api = driver.api();
  std::unique_ptr<Compressor> compressor(
      new Compressor(driver, context, cache, mode, std::move(codec).value(), std::move(store).value()));
  driver::ScopedContext scope(api, context);
  if (api.eventCreate(&compressor->codec_start_, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
      api.eventCreate(&compressor->codec_end_, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    return util::Status(util::Error::driver_error, "cuEventCreate failed for the codec's events");
  }
  return compressor;
}

Compressor::Compressor(const driver::Driver& driver, CUcontext context, HostCache& cache, CompressMode mode,
                       std::unique_ptr<PageCodec> codec, std::unique_ptr<CompressedStore> store)
    : api_(driver.api()),
      context_(context),
      cache_(cache),
      mode_(mode),
      codec_(std::move(codec)),
      store_(std::move(store)) {}

Compressor::~Compressor() {
  driver::ScopedContext scope(api_, context_);
  // Pages still mapped in the pool when the residency goes: their pool is
  // being torn down too, and their streams go with the store.
  for (CompressedPage* page : live_) delete page;
  if (codec_start_ != nullptr) (void)api_.eventDestroy(codec_start_);
  if (codec_end_ != nullptr) (void)api_.eventDestroy(codec_end_);
  store_.reset();
}

bool Compressor::wait(CUstream stream, double* wait_ms) const {
  const util::HostTime waited(wait_ms);
  return api_.streamSynchronize(stream) == CUDA_SUCCESS;
}

void Compressor::time_codec(CUevent start, CUevent end) {
  float ms = 0;
  if (api_.eventElapsedTime == nullptr || api_.eventElapsedTime(&ms, start, end) != CUDA_SUCCESS) return;
  std::lock_guard<std::mutex> guard(stats_lock_);
  stats_.codec_ms += ms;
}

bool Compressor::to_host(std::vector<PageMove>& moves, CUstream stream, double* wait_ms) {
  for (PageMove& m : moves) m.host = nullptr;
  for (std::size_t first = 0; first < moves.size(); first += PageCodec::kBatch) {
    const std::size_t n = std::min(PageCodec::kBatch, moves.size() - first);
    if (!to_host_group(moves.data() + first, n, stream, wait_ms)) return false;
  }
  return true;
}

bool Compressor::to_host_group(PageMove* moves, std::size_t n, CUstream stream, double* wait_ms) {
  const std::size_t page_size = codec_->page_size();
  std::vector<CUdeviceptr> pages(n);
  for (std::size_t i = 0; i < n; ++i) pages[i] = moves[i].reservation->page_address(moves[i].page);
  std::vector<Codec> choice(n, Codec::raw);
  std::uint64_t unsampled = 0;
  std::uint64_t raw_by_sample = 0;
  std::uint64_t no_room = 0;
  const bool automatic = mode_ == CompressMode::automatic;
  // Every compressed page must be able to become a raw host page (an
  // unreadable launch unpacks them all): compress only while the host
  // cache's bound leaves room for all of them raw, this batch included.
  const std::size_t limit_pages = cache_.limit_bytes() / page_size;
  const std::size_t raw_pages = cache_.stats().in_use_bytes / page_size - store_->stats().held_bytes / page_size;
  const bool room = raw_pages + compressed_now() + n <= limit_pages;
  const bool sample = on() && room && !(automatic && backoff_ > 0);
  if (on() && !room) no_room = n;
  if (on() && room && !sample) {
    --backoff_;
    unsampled = n;
  }
  // compress:auto, after a batch whose every page paid: the whole count is
  // the sample, and the pages that pay need no second count.
  const std::uint32_t stride = automatic && all_paid_ ? 1 : kSampleStride;
  if (sample) {
    (void)api_.eventRecord(codec_start_, stream);
    if (!codec_->count(pages.data(), n, stride, stream)) return false;
    (void)api_.eventRecord(codec_end_, stream);
    if (!wait(stream, wait_ms)) return false;
    time_codec(codec_start_, codec_end_);
    std::size_t paid = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t zero32 = codec_->estimate(i, stride, Codec::zero32);
      const std::uint64_t zero16 = codec_->estimate(i, stride, Codec::zero16);
      const Codec best = zero16 < zero32 ? Codec::zero16 : Codec::zero32;
      if (std::min(zero32, zero16) * 8 <= page_size * (8 - kMinSavingEighths)) {
        choice[i] = best;
        ++paid;
      } else {
        ++raw_by_sample;
      }
    }
    all_paid_ = paid == n;
    if (paid > 0) {
      backoff_next_ = 1;
    } else {
      backoff_ = backoff_next_;
      backoff_next_ = std::min<std::size_t>(backoff_next_ * 2, 64);
    }
  }
  // The pages to pack: counted whole, then planned.
  std::vector<std::size_t> chosen;
  std::vector<CUdeviceptr> chosen_pages;
  for (std::size_t i = 0; i < n; ++i) {
    if (choice[i] == Codec::raw) continue;
    chosen.push_back(i);
    chosen_pages.push_back(pages[i]);
  }
  std::vector<PageCodec::Page> packs;
  std::vector<std::size_t> pack_moves;  // the move of each pack
  std::vector<std::uint32_t> lengths(n, 0);
  if (!chosen.empty()) {
    if (stride != 1) {
      (void)api_.eventRecord(codec_start_, stream);
      if (!codec_->count(chosen_pages.data(), chosen.size(), 1, stream)) return false;
      (void)api_.eventRecord(codec_end_, stream);
      if (!wait(stream, wait_ms)) return false;
      time_codec(codec_start_, codec_end_);
    }
    for (std::size_t k = 0; k < chosen.size(); ++k) {
      const std::size_t i = chosen[k];
      // Each chosen page's counts: in table k after the second count, in
      // its own table when the first count was whole.
      const std::size_t table = stride != 1 ? k : i;
      const std::uint32_t length = codec_->plan(table, choice[i]);
      const CUdeviceptr at =
          std::uint64_t{length} * 8 <= page_size * (8 - kMinSavingEighths) ? store_->take(length) : 0;
      if (at == 0) {
        // Larger than the sample said, or no room in the store: raw after all.
        choice[i] = Codec::raw;
        continue;
      }
      lengths[i] = length;
      packs.push_back({pages[i], at, choice[i], table});
      pack_moves.push_back(i);
    }
  }
  // The rest go raw, into host pages of their own.
  std::vector<space::HostPage*> raw(n, nullptr);
  bool queued = true;
  for (std::size_t i = 0; i < n && queued; ++i) {
    if (choice[i] != Codec::raw) continue;
    raw[i] = cache_.take();
    if (raw[i] == nullptr) continue;
    queued = api_.memcpyDtoDAsync(raw[i]->staging, pages[i], page_size, stream) == CUDA_SUCCESS;
  }
  bool packed = true;
  if (queued && !packs.empty()) {
    (void)api_.eventRecord(codec_start_, stream);
    packed = codec_->pack(packs.data(), packs.size(), stream);
    (void)api_.eventRecord(codec_end_, stream);
  }
  const bool done = wait(stream, wait_ms) && queued && packed;
  if (!done) {
    for (space::HostPage* page : raw) {
      if (page != nullptr) cache_.give(page);
    }
    for (std::size_t k = 0; k < packs.size(); ++k) store_->give(packs[k].stream, lengths[pack_moves[k]]);
    return false;
  }
  if (!packs.empty()) time_codec(codec_start_, codec_end_);
  std::uint64_t before = 0;
  std::uint64_t after = 0;
  for (std::size_t k = 0; k < packs.size(); ++k) {
    const PageCodec::Page& p = packs[k];
    const std::size_t i = pack_moves[k];
    auto* page = new CompressedPage();
    page->compressed = true;
    page->stream = p.stream;
    page->stream_bytes = lengths[i];
    page->codec = p.codec;
    moves[i].host = page;
    live_.insert(page);
    before += page_size;
    after += lengths[i];
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (raw[i] != nullptr) moves[i].host = raw[i];
  }
  compressed_now_.fetch_add(packs.size(), std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard(stats_lock_);
  stats_.compressed_pages += packs.size();
  stats_.bytes_before += before;
  stats_.bytes_after += after;
  stats_.raw_pages += raw_by_sample;
  stats_.raw_bytes += raw_by_sample * page_size;
  stats_.unsampled_pages += unsampled;
  stats_.raw_for_room_pages += no_room;
  return true;
}

bool Compressor::fill(CUdeviceptr to, const space::HostPage& from, CUstream stream) {
  if (!from.compressed) {
    return api_.memcpyDtoDAsync(to, from.staging, codec_->page_size(), stream) == CUDA_SUCCESS;
  }
  const auto& page = static_cast<const CompressedPage&>(from);
  const PageCodec::Page p{to, page.stream, page.codec, 0};
  return codec_->unpack(&p, 1, stream);
}

void Compressor::release(space::HostPage* page) {
  if (page == nullptr) return;
  if (!page->compressed) {
    cache_.give(page);
    return;
  }
  auto* compressed = static_cast<CompressedPage*>(page);
  store_->give(compressed->stream, compressed->stream_bytes);
  live_.erase(compressed);
  delete compressed;
  compressed_now_.fetch_sub(1, std::memory_order_relaxed);
}

bool Compressor::expand(space::AddressSpace& space, space::Reservation& r, std::size_t p, CUstream stream) {
  space::HostPage* current = r.page(p).host;
  if (current == nullptr || !current->compressed) return true;
  space::HostPage* raw = cache_.take();
  bool unpacked = raw != nullptr;
  if (unpacked) {
    driver::ScopedContext scope(api_, context_);
    double waited = 0;
    unpacked = fill(raw->staging, *current, stream) && wait(stream, &waited);
  }
  space::HostPage* released = nullptr;
  if (!unpacked || !space.swap_host_page(r, p, raw, &released)) {
    if (raw != nullptr && raw->current.reservation == nullptr) cache_.give(raw);  // else the space keeps it
    std::lock_guard<std::mutex> guard(stats_lock_);
    stats_.expand_failures++;
    return false;
  }
  release(released);
  std::lock_guard<std::mutex> guard(stats_lock_);
  stats_.expanded_pages++;
  return true;
}

std::vector<space::PageLocation> Compressor::compressed_locations() const {
  std::vector<space::PageLocation> at;
  at.reserve(live_.size());
  for (const CompressedPage* page : live_) {
    if (page->current.reservation != nullptr) at.push_back(page->current);
  }
  return at;
}

bool Compressor::try_stats(std::chrono::steady_clock::time_point deadline, CompressStats* out) const {
  CompressStats s;
  {
    std::unique_lock<std::mutex> guard(stats_lock_, std::defer_lock);
    if (!util::try_lock_until(guard, deadline)) return false;
    s = stats_;
  }
  s.store = store_->stats();
  s.compressed_now = compressed_now();
  *out = s;
  return true;
}

CompressStats Compressor::stats() const {
  CompressStats s;
  {
    std::lock_guard<std::mutex> guard(stats_lock_);
    s = stats_;
  }
  s.store = store_->stats();
  s.compressed_now = compressed_now();
  return s;
}

}  // namespace tidepool::residency
