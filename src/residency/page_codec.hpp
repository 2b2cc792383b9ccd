// PageCodec: tidepool's compression kernels (kernels/) loaded on one
// context, with the pinned tables their launches share with the host.
//
// Compressing a batch of pages takes three launches on one stream, the host
// waiting for each before the next (it must read what the device found):
//   count(stride > 1)  samples each page: one chunk in `stride` is counted;
//   estimate()         says from the sample what each codec would make of the
//                      page, so the caller picks one or sends the page raw;
//   count(stride 1)    counts every chunk of the pages to compress, plan()
//                      writes each one's stream prefix from the counts, and
//                      pack() writes the streams.
// unpack() is one launch with nothing to wait for: a stream holds its own
// offsets. Each launch takes up to kBatch pages, passed by value (the
// kernels' PageTasks), so nothing it reads outlives the call but the pages,
// the streams and, until the host has waited for the launch, the tables.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "driver/driver.hpp"
#include "kernels/kernels.hpp"
#include "util/util.hpp"

namespace tidepool::residency {

class PageCodec {
 public:
  static constexpr std::size_t kBatch = kernels::kMaxTasks;

  // not_supported when the library was built without its kernels or the
  // driver will not load them (the reason says which).
  static util::Result<std::unique_ptr<PageCodec>> create(const driver::Driver& driver, CUcontext context,
                                                         std::size_t page_size);
  ~PageCodec();
  PageCodec(const PageCodec&) = delete;
  PageCodec& operator=(const PageCodec&) = delete;

  // The count kernel on pages[i] (i < n <= kBatch), chunk 0, stride, 2 *
  // stride, ...: the counts land in table i. The current context must be
  // this codec's.
  bool count(const CUdeviceptr* pages, std::size_t n, std::uint32_t stride, CUstream stream);
  // After count(stride) has finished: the stream length page i would have
  // under `codec`, exact for stride 1 and extrapolated from the sample above.
  [[nodiscard]] std::uint64_t estimate(std::size_t i, std::uint32_t stride, kernels::Codec codec) const;
  // After count(1) has finished: writes page i's stream prefix for `codec`
  // over its table; returns the stream's length.
  std::uint32_t plan(std::size_t i, kernels::Codec codec);

  struct Page {
    CUdeviceptr device = 0;
    CUdeviceptr stream = 0;  // device-accessible host memory
    kernels::Codec codec = kernels::Codec::zero32;
    std::size_t table = 0;  // pack: the table plan() wrote
  };
  // Writes each page's stream (n <= kBatch; tables planned).
  bool pack(const Page* pages, std::size_t n, CUstream stream);
  // Decodes each page's stream into its device address (n <= kBatch).
  bool unpack(const Page* pages, std::size_t n, CUstream stream);

  [[nodiscard]] std::uint32_t chunks() const noexcept { return chunks_; }
  [[nodiscard]] std::size_t page_size() const noexcept { return page_size_; }

 private:
  PageCodec(const driver::Driver& driver, CUcontext context, std::size_t page_size);
  bool launch(CUfunction function, const kernels::PageTasks& tasks, std::uint32_t grid_x, std::uint32_t* stride,
              CUstream stream);
  // The launch's tasks for `pages`, with their tables (pack) or without (unpack).
  [[nodiscard]] kernels::PageTasks tasks_of(const Page* pages, std::size_t n, bool tables) const;
  [[nodiscard]] std::size_t table_bytes() const noexcept { return kernels::payloads_at(chunks_); }
  [[nodiscard]] std::uint32_t* table(std::size_t i) const noexcept {
    return reinterpret_cast<std::uint32_t*>(tables_ + i * table_bytes());
  }

  const driver::Api& api_;
  CUcontext context_;
  std::size_t page_size_;
  std::uint32_t chunks_;
  CUmodule module_ = nullptr;
  CUfunction count_ = nullptr;
  CUfunction pack_ = nullptr;
  CUfunction unpack_ = nullptr;
  unsigned char* tables_ = nullptr;  // kBatch tables, mapped pinned memory
  CUdeviceptr tables_device_ = 0;
};

}  // namespace tidepool::residency
