// Allocator construction: primary context, capabilities, space and pool.
#include "runtime/allocator.hpp"

namespace tidepool::runtime {

util::Result<std::unique_ptr<Allocator>> Allocator::create(const driver::Driver& driver,
                                                           const AllocatorOptions& options) {
  const driver::Api& api = driver.api();
  if (auto s = driver::check(api.init(0), "cuInit"); !s) return s;
  std::unique_ptr<Allocator> allocator(new Allocator());
  allocator->driver_ = &driver;
  allocator->device_ = options.device;
  if (auto s = driver::check(api.deviceGet(&allocator->cu_device_, options.device), "cuDeviceGet"); !s) return s;
  if (auto s = driver::check(api.devicePrimaryCtxRetain(&allocator->context_, allocator->cu_device_),
                             "cuDevicePrimaryCtxRetain");
      !s) {
    return s;
  }
  driver::ScopedContext scope(api, allocator->context_);
  space::AddressSpace::Options space_options;
  space_options.device = options.device;
  space_options.device_limit = options.device_limit;
  space_options.use_vmm = options.use_vmm;
  auto space = space::AddressSpace::create(driver, space_options);
  if (!space) return space.status();
  allocator->space_ = std::move(space.value());
  auto pool = pool::Pool::create(driver, *allocator->space_, allocator->context_, options.pool);
  if (!pool) return pool.status();
  allocator->pool_ = std::move(pool.value());
  return allocator;
}

Allocator::~Allocator() {
  pool_.reset();
  space_.reset();
  if (context_ != nullptr && driver_->api().devicePrimaryCtxRelease != nullptr) {
    (void)driver_->api().devicePrimaryCtxRelease(cu_device_);
  }
}

}  // namespace tidepool::runtime
