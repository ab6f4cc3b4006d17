/* observe: what the agent tells the outside while it runs. The JSON-lines event stream (events.h) and the
 * Prometheus endpoint (metrics.h) behind one set of hooks (obs.h), and torch's file-timer watchdog
 * (ftimer.h), and hang detection from output, CPU
 * time and GPU utilisation (stall.h).
 * May use: base, store, config, discover, proc, rdzv, nccl (it reports on them). Used by the agent. */
#ifndef TRUN_OBSERVE_H
#define TRUN_OBSERVE_H

#include "events.h"
#include "ftimer.h"
#include "metrics.h"
#include "obs.h"
#include "stall.h"

#endif
