// Shared set-up for the benchmarks: the sim driver and an Allocator over it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "driver/driver.hpp"
#include "runtime/allocator.hpp"

namespace tidepool::bench {

inline const driver::Driver& sim() {
  static std::unique_ptr<driver::Driver> driver = [] {
    auto opened = driver::Driver::open(TIDEPOOL_SIM_LIBRARY);
    if (!opened) {
      std::fprintf(stderr, "cannot open the sim driver: %s\n", opened.status().message());
      std::exit(1);
    }
    return std::move(opened.value());
  }();
  return *driver;
}

inline std::unique_ptr<runtime::Allocator> make_allocator(const std::string& policy, std::size_t limit = 0) {
  runtime::AllocatorOptions options;
  options.pool.policy = policy;
  options.device_limit = limit;
  auto created = runtime::Allocator::create(sim(), options);
  if (!created) {
    std::fprintf(stderr, "cannot create the allocator: %s\n", created.status().message());
    std::exit(1);
  }
  return std::move(created.value());
}

}  // namespace tidepool::bench
