// Steps: a training-like launch sequence recorded into a LaunchSchedule,
// for the tests of the schedule and of what is built on it.
#pragma once

#include <cstdint>
#include <vector>

#include "residency/launch_schedule.hpp"

namespace tidepool::residency::training {

// One kernel for every layer, as a framework's elementwise kernel would be:
// forward layer i reads activation i-1 and writes activation i; backward
// layer i reads activation i and the gradient above and writes a gradient;
// each block is freed after its last use. `weight` is read by every forward
// layer and keeps its block.
class Steps {
 public:
  static constexpr std::uintptr_t kKernel = 0x4242;
  explicit Steps(int layers) : layers_(layers) {}
  // Records one step; returns the launch index each backward layer took.
  // `after(k)` runs after the step's k-th launch.
  template <typename After>
  std::vector<std::uint64_t> step(LaunchSchedule& s, After after) {
    int k = 0;
    std::vector<ScheduledBlock> activation(static_cast<std::size_t>(layers_));
    std::vector<std::uint64_t> backward(static_cast<std::size_t>(layers_));
    for (int i = 0; i < layers_; ++i) {
      activation[static_cast<std::size_t>(i)] = fresh();
      std::vector<ScheduledBlock> named{weight_, activation[static_cast<std::size_t>(i)]};
      if (i > 0) named.insert(named.begin(), activation[static_cast<std::size_t>(i - 1)]);
      s.record(kKernel, named.data(), named.size());
      after(k++);
    }
    ScheduledBlock upper{};
    for (int i = layers_ - 1; i >= 0; --i) {
      const ScheduledBlock gradient = fresh();
      std::vector<ScheduledBlock> named{activation[static_cast<std::size_t>(i)], gradient};
      if (upper.id != 0) named.insert(named.begin() + 1, upper);
      backward[static_cast<std::size_t>(i)] = s.launches();
      s.record(kKernel, named.data(), named.size());
      after(k++);
      s.forget(activation[static_cast<std::size_t>(i)].id);
      if (upper.id != 0) s.forget(upper.id);
      upper = gradient;
    }
    s.forget(upper.id);
    last_activations_ = activation;
    return backward;
  }
  std::vector<std::uint64_t> step(LaunchSchedule& s) {
    return step(s, [](int) {});
  }
  [[nodiscard]] const std::vector<ScheduledBlock>& activations() const { return last_activations_; }
  [[nodiscard]] ScheduledBlock weight() const { return weight_; }
  ScheduledBlock fresh() {
    ++next_id_;
    return ScheduledBlock{next_id_, 0x100000 * next_id_};
  }

 private:
  int layers_;
  std::uint64_t next_id_ = 1;
  ScheduledBlock weight_{1, 0x100000};
  std::vector<ScheduledBlock> last_activations_;
};

}  // namespace tidepool::residency::training
