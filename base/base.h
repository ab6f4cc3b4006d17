/* base: what every module of trun shares and nothing of trun's needs to know about: one-line diagnostics
 * (log.h), growable byte buffers and a small PRNG (buf.h), closing a child's inherited descriptors on any
 * glibc (closefrom.h), one clock (clock.h: monotonic for intervals and deadlines, wall for timestamps),
 * the lookup of a variable in an environment vector (env.h), the string builder of fixed buffers and error
 * messages (str.h), the exit code table of every program (exit.h), waits that say what they wait for
 * (wait.h), and a bounded pickle reader / writer with base64 (pickle.h: torchelastic's c10d state in rdzv,
 * torch's flight-recorder dumps in hang).
 * May use: nothing of trun's (libc only). Every other module and program may use it. */
#ifndef TRUN_BASE_H
#define TRUN_BASE_H

#include "buf.h"
#include "clock.h"
#include "closefrom.h"
#include "env.h"
#include "exit.h"
#include "file.h"
#include "log.h"
#include "pickle.h"
#include "str.h"
#include "wait.h"

#endif
