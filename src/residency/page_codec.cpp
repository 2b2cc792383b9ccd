// See page_codec.hpp.
#include "residency/page_codec.hpp"

#include <cstring>
#include <vector>

namespace tidepool::residency {

using kernels::Codec;

util::Result<std::unique_ptr<PageCodec>> PageCodec::create(const driver::Driver& driver, CUcontext context,
                                                           std::size_t page_size) {
  const driver::Api& api = driver.api();
  const auto image = kernels::image();
  if (image.empty()) {
    return util::Status(util::Error::not_supported, "this build of tidepool has no kernels (nvcc was not found)");
  }
  if (page_size == 0 || page_size % kernels::kChunkBytes != 0 || page_size / kernels::kChunkBytes > 0xffffU) {
    return util::Status(util::Error::not_supported, "the page size is not a whole number of codec chunks");
  }
  if (api.moduleLoadData == nullptr || api.moduleGetFunction == nullptr || api.launchKernel == nullptr ||
      api.memHostAlloc == nullptr || api.memHostGetDevicePointer == nullptr) {
    return util::Status(util::Error::not_supported, "the driver lacks the module and launch entry points");
  }
  std::unique_ptr<PageCodec> codec(new PageCodec(driver, context, page_size));
  driver::ScopedContext scope(api, context);
  if (auto s = driver::check(api.moduleLoadData(&codec->module_, image.data()), "cuModuleLoadData"); !s) return s;
  for (auto [function, name] :
       {std::pair{&codec->count_, kernels::kCountKernel}, std::pair{&codec->pack_, kernels::kPackKernel},
        std::pair{&codec->unpack_, kernels::kUnpackKernel}}) {
    if (auto s = driver::check(api.moduleGetFunction(function, codec->module_, name), "cuModuleGetFunction"); !s) {
      return s;
    }
  }
  void* tables = nullptr;
  const std::size_t bytes = kBatch * codec->table_bytes();
  if (auto s = driver::check(api.memHostAlloc(&tables, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
                             "cuMemHostAlloc");
      !s) {
    return s;
  }
  codec->tables_ = static_cast<unsigned char*>(tables);
  if (auto s =
          driver::check(api.memHostGetDevicePointer(&codec->tables_device_, tables, 0), "cuMemHostGetDevicePointer");
      !s) {
    return s;
  }
  std::memset(tables, 0, bytes);
  return codec;
}

PageCodec::PageCodec(const driver::Driver& driver, CUcontext context, std::size_t page_size)
    : api_(driver.api()),
      context_(context),
      page_size_(page_size),
      chunks_(static_cast<std::uint32_t>(page_size / kernels::kChunkBytes)) {}

PageCodec::~PageCodec() {
  driver::ScopedContext scope(api_, context_);
  if (tables_ != nullptr) (void)api_.memFreeHost(tables_);
  if (module_ != nullptr && api_.moduleUnload != nullptr) (void)api_.moduleUnload(module_);
}

bool PageCodec::launch(CUfunction function, const kernels::PageTasks& tasks, std::uint32_t grid_x,
                       std::uint32_t* stride, CUstream stream) {
  if (tasks.count == 0) return true;
  kernels::PageTasks copy = tasks;
  void* with_stride[] = {&copy, stride};
  void* without[] = {&copy};
  return api_.launchKernel(function, grid_x, tasks.count, 1, kernels::kThreadsPerBlock, 1, 1, 0, stream,
                           stride != nullptr ? with_stride : without, nullptr) == CUDA_SUCCESS;
}

bool PageCodec::count(const CUdeviceptr* pages, std::size_t n, std::uint32_t stride, CUstream stream) {
  if (n > kBatch || stride == 0) return false;
  kernels::PageTasks tasks;
  for (std::size_t i = 0; i < n; ++i) {
    kernels::PageTask& t = tasks.page[i];
    t.device = pages[i];
    t.table = tables_device_ + i * table_bytes();
    t.chunks = chunks_;
  }
  tasks.count = static_cast<std::uint32_t>(n);
  return launch(count_, tasks, (chunks_ + stride - 1) / stride, &stride, stream);
}

std::uint64_t PageCodec::estimate(std::size_t i, std::uint32_t stride, Codec codec) const {
  const std::uint32_t* counts = table(i);
  std::uint64_t sampled = 0;
  std::uint64_t payload = 0;
  for (std::uint32_t c = 0; c < chunks_; c += stride) {
    payload += kernels::payload_bytes(codec, kernels::nonzero_of(counts[c], codec));
    ++sampled;
  }
  return kernels::payloads_at(chunks_) + (sampled == 0 ? 0 : (payload * chunks_ + sampled - 1) / sampled);
}

std::uint32_t PageCodec::plan(std::size_t i, Codec codec) {
  std::vector<std::uint32_t> counts(table(i), table(i) + chunks_);
  return kernels::write_prefix(codec, counts.data(), chunks_, table(i));
}

kernels::PageTasks PageCodec::tasks_of(const Page* pages, std::size_t n, bool tables) const {
  kernels::PageTasks tasks;
  for (std::size_t i = 0; i < n; ++i) {
    kernels::PageTask& t = tasks.page[i];
    t.device = pages[i].device;
    t.stream = pages[i].stream;
    t.table = tables ? tables_device_ + pages[i].table * table_bytes() : 0;
    t.chunks = chunks_;
    t.codec = static_cast<std::uint32_t>(pages[i].codec);
  }
  tasks.count = static_cast<std::uint32_t>(n);
  return tasks;
}

bool PageCodec::pack(const Page* pages, std::size_t n, CUstream stream) {
  return n <= kBatch && launch(pack_, tasks_of(pages, n, true), chunks_, nullptr, stream);
}

bool PageCodec::unpack(const Page* pages, std::size_t n, CUstream stream) {
  // The stream holds its own offsets: no table.
  return n <= kBatch && launch(unpack_, tasks_of(pages, n, false), chunks_, nullptr, stream);
}

}  // namespace tidepool::residency
