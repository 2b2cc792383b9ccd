// start_background_thread: every thread tidepool starts inside the host
// process blocks the asynchronous signals (SIGINT, SIGTERM, SIGALRM, ...), so
// that a signal meant for the program is never delivered to one of ours. A
// handler run on our thread would find tidepool's state mid-update, and one
// that calls exit() would join or lock what that very thread holds. Faults
// (SIGSEGV, SIGBUS, ...) stay unblocked: the kernel raises them in the
// faulting thread whatever its mask, and sanitizers report through them.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace tidepool::util {

template <typename F>
std::thread start_background_thread(F&& body) {
  sigset_t blocked;
  ::sigfillset(&blocked);
  for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS}) ::sigdelset(&blocked, fault);
  sigset_t previous;
  ::pthread_sigmask(SIG_BLOCK, &blocked, &previous);
  // The new thread inherits the mask; this one gets its own back either way.
  struct Restore {
    sigset_t mask;
    ~Restore() { ::pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{previous};
  return std::thread(std::forward<F>(body));
}

}  // namespace tidepool::util
