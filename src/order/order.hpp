// The order layer's one header: stream ordering for the whole process, used
// by the pool (when a freed block may be reused) and by residency (when a
// page may move). It knows streams and events, never blocks or pages.
//   stream_keys.hpp      how a stream is named (the legacy stream, per-thread
//                        streams, "no pending work", "after a barrier")
//   event_cache.hpp      events kept for reuse
//   stream_registry.hpp  every stream of the process, the device barrier and
//                        gate, retired streams' last events
//   stream_followers.hpp the idle streams a barrier leaves to catch up with it
//                        at their next submission
//   barrier_fences.hpp   when the work before recent device barriers finished
//   context_fence.hpp    a point in a context's stream order, as events on
//                        every stream (and why they cover all its work)
//   free_fences.hpp      when frees made with cudaFree semantics are known
//                        finished, each batch behind a context fence
//   stream_fences.hpp    how far each stream's work is known finished, for
//                        frees made in stream order
#pragma once

#include "order/barrier_fences.hpp"
#include "order/context_fence.hpp"
#include "order/event_cache.hpp"
#include "order/free_fences.hpp"
#include "order/stream_fences.hpp"
#include "order/stream_followers.hpp"
#include "order/stream_keys.hpp"
#include "order/stream_registry.hpp"
