// Prints the options table, generated from the rows in src/runtime/options.hpp.
#include <cstdio>

#include "runtime/runtime.hpp"

int main() {
  std::fputs(tidepool::runtime::options_markdown().c_str(), stdout);
  return 0;
}
