// Corpus replay: a main() for a fuzz target in builds without libFuzzer (GCC).
// Runs LLVMFuzzerTestOneInput once on each file named, or on each file of each
// directory named, so the seed corpus is a regression test of the normal
// suite. A target signals a violated invariant by aborting.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "running %s (%zu bytes)\n", path.c_str(), bytes.size());
  // A copy of exactly the input's size, so that ASan (when on) sees overreads.
  std::vector<std::uint8_t> data(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(data.data(), data.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t inputs = 0;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());  // a stable order, so a failure repeats alike
    } else {
      files.push_back(arg);
    }
    for (const auto& file : files) {
      failures += run_file(file);
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...: no inputs found\n", argv[0]);
    return 1;
  }
  std::fprintf(stderr, "%zu inputs, %d unreadable\n", inputs, failures);
  return failures == 0 ? 0 : 1;
}
