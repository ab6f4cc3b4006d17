/* proc: processes the agent starts and watches, as torch's elastic multiprocessing does. Fork + exec
 * without a shell, in a session of its own, with CPU affinity and resource limits (spawn.h); their output
 * read line by line, prefixed, tee'd and logged (output.h); the torchelastic error files and the failure
 * report (report.h) with each death's one-line cause (cause.h; memory cgroups' OOM kills: memcg.h); the guard
 * process that kills every worker session if the agent dies (watchdog.h) and what the workers started
 * outside their sessions (strays.h); the supervisor's loop side for a launcher of children (super.h:
 * SIGCHLD reaping, caught signals, a grace timer); environments and argument lists as
 * string vectors (strv.h); the warm-start pool of pre-started interpreters (warm.h); the workers' torchrun
 * variables, named once with what each user needs of them (round_vars.h); loopback ports held for the
 * workers' NCCL RAS (portheld.h) and a bounded TCP relay from one such port to others (relay.h).
 * May use: base, discover (CPU lists). Used by the agent, the nccl module (trun-preflight
 * per local rank), observe (stall detection reads output activity) and the launcher (--hostfile). */
#ifndef TRUN_PROC_H
#define TRUN_PROC_H

#include "cause.h"
#include "memcg.h"
#include "output.h"
#include "portheld.h"
#include "relay.h"
#include "report.h"
#include "round_vars.h"
#include "spawn.h"
#include "strays.h"
#include "strv.h"
#include "super.h"
#include "warm.h"
#include "watchdog.h"

#endif
