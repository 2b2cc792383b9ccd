// Test support: code of the test executable itself, for a return address
// there (a caller that CallSites names as the program).
#pragma once

namespace tidepool::testing {

[[gnu::noinline]] inline void code_of_this_program() { asm volatile(""); }

}  // namespace tidepool::testing
