// The command-line options the two residency benchmarks share: the shape
// of their training step (bench_residency, bench_residency_live).
#pragma once

#include <CLI/CLI.hpp>

namespace tidepool::bench {

// `Options` has layers, activation_mib, kernel_ms, steps and copy_gbps.
template <typename Options>
void add_step_options(CLI::App& app, Options& o) {
  app.add_option("--layers", o.layers, "Layers per step")->check(CLI::Range(1, 1000));
  app.add_option("--activation-mib", o.activation_mib, "Bytes of each activation and gradient, in MiB")
      ->check(CLI::Range(0.001, 65536.0));
  app.add_option("--kernel-ms", o.kernel_ms, "Wall time each layer kernel takes, in ms")->check(CLI::Range(0.0, 1e4));
  app.add_option("--steps", o.steps, "Steps per run, the first a warm-up that is not timed")
      ->check(CLI::Range(2, 100000));
  app.add_option("--copy-gbps", o.copy_gbps, "The sim's host<->device copy bandwidth in GB/s (0: unlimited)")
      ->check(CLI::Range(0.0, 1e6));
}

}  // namespace tidepool::bench
