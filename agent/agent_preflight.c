/* --preflight on the agent's side (agent/nccl/preflight.h, docs/nccl-efa.md): the all-ranks preflight at the
 * job's first round, and the local part a spare runs while it waits in the rendezvous.
 *
 * The all-ranks preflight joins one communicator over every rank of the round, so it runs only where every
 * node of the round runs it: the job's first round (rendezvous round 0), which is also each of its nodes'
 * first. A node that joins later (a spare taking over, a late joiner) would wait alone for the others until
 * the init time-out: it skips that part and says so. A spare runs, once, the node-local part instead while
 * it waits (this node's GPUs alone, as `trun-topo preflight`): a child trun polled from the rendezvous
 * wait's hook, so that the wait's keep-alive goes on; a FAIL (or a preflight that cannot measure) makes the
 * spare leave unhealthy and excluded (kind "preflight", exit 3) instead of taking over. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/nccl/nccl.h"
#include "agent_int.h"

static double local_timeout(void) {
  const char *to = getenv("TRUN_PREFLIGHT_TIMEOUT");
  return to && *to ? atof(to) : 600;
}

/* The local preflight's child ended with wait status st (or ran past its time-out: timed_out): its verdict
 * into a->pf.local_verdict; a failure makes the node unhealthy. */
static void local_done(agent *a, int st, int timed_out) {
  int code = timed_out ? 124 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  trun_pf_result res;
  int have = a->pf.result[0] && trun_pf_result_read(a->pf.result, &res) == 0;
  if (a->pf.result[0]) unlink(a->pf.result);
  a->pf.pid = 0;
  if (code == 0) {
    a->pf.local = TRUN_PF_LOCAL_OK;
    if (have && res.peak_gbps >= 0)
      snprintf(a->pf.local_verdict, sizeof(a->pf.local_verdict), "%s, peak busbw %.1f GB/s on %s",
               trun_pf_verdict_name(res.verdict), res.peak_gbps, res.fabric);
    else
      snprintf(a->pf.local_verdict, sizeof(a->pf.local_verdict), "%s",
               have ? trun_pf_verdict_name(res.verdict) : "passed");
    fprintf(stderr,
            "trun: --preflight: the local preflight of this waiting node: %s (%.1f s); it takes over "
            "without running it again\n",
            a->pf.local_verdict, trun_mono_s() - a->pf.t0);
    return;
  }
  a->pf.local = TRUN_PF_LOCAL_FAILED;
  if (timed_out)
    snprintf(a->pf.local_verdict, sizeof(a->pf.local_verdict),
             "still running after %.0f s (NCCL cannot set up on this node's GPUs): killed", local_timeout());
  else if (have && res.verdict == TRUN_PF_FAIL)
    snprintf(a->pf.local_verdict, sizeof(a->pf.local_verdict), "FAIL, peak busbw %.1f GB/s on %s%s%s",
             res.peak_gbps, res.fabric, res.cause[0] ? ": " : "", res.cause);
  else
    snprintf(a->pf.local_verdict, sizeof(a->pf.local_verdict),
             "error: trun-preflight could not measure (exit %d; its lines above say why)", code);
  snprintf(a->health.msg, sizeof(a->health.msg),
           "failed the local NCCL preflight while it waited in the rendezvous (--preflight): %s",
           a->pf.local_verdict);
  a->health.unhealthy = 1;
  a->health.kind = "preflight";
  a->health.lr = -1;
  a->health.time = trun_wall_s();
  trun_error("%s; this node leaves the job and exits %d, so that the scheduler replaces it (docs/health.md)",
             a->health.msg, TRUN_EXIT_UNHEALTHY);
}

/* Polls the running local preflight (block: until it ends). 1 while it still runs. */
static int local_poll(agent *a, int block) {
  while (a->pf.pid > 0) {
    int st = 0;
    pid_t w = a->pf.reaped ? a->pf.pid : waitpid(a->pf.pid, &st, WNOHANG);
    if (a->pf.reaped) st = a->pf.status;
    if (w == a->pf.pid || (w < 0 && errno == ECHILD)) {
      local_done(a, w == a->pf.pid ? st : (1 << 8), 0);
      return 0;
    }
    if (trun_mono_s() - a->pf.t0 > local_timeout()) {
      kill(-a->pf.pid, SIGKILL);
      kill(a->pf.pid, SIGKILL);
      waitpid(a->pf.pid, NULL, 0);
      local_done(a, 0, 1);
      return 0;
    }
    if (!block) return 1;
    usleep(50 * 1000);
  }
  return 0;
}

void trun__agent_preflight_wait(agent *a) {
  if (!a->cfg->preflight || a->health.unhealthy) return;
  if (a->pf.local == TRUN_PF_LOCAL_RUNNING) {
    local_poll(a, 0);
    return;
  }
  /* Once, before this agent's first round, and only as a spare: a node waiting for the job's first round
   * runs the all-ranks preflight there. */
  if (a->pf.local != TRUN_PF_LOCAL_NONE || a->pf.rounds > 0 ||
      strcmp(trun_rdzv_wait_kind(a->rdzv), "spare") != 0)
    return;
  int ngpu = a->node ? a->node->ngpu : 0;
  if (ngpu <= 1) {
    a->pf.local = TRUN_PF_LOCAL_SKIPPED;
    snprintf(a->pf.local_verdict, sizeof(a->pf.local_verdict), "skipped: %s",
             ngpu ? "one GPU, no communication on this node alone" : "no GPU visible on this node");
    fprintf(stderr, "trun: --preflight: this node waits as a spare: local preflight %s\n",
            a->pf.local_verdict);
    return;
  }
  const char *tmpdir = getenv("TMPDIR");
  snprintf(a->pf.result, sizeof(a->pf.result), "%s/trun-preflight-XXXXXX",
           tmpdir && *tmpdir ? tmpdir : "/tmp");
  int fd = mkstemp(a->pf.result);
  if (fd >= 0) {
    close(fd);
    trun_watchdog_remove_on_exit(&a->guard, a->pf.result); /* gone with an agent killed by SIGKILL too */
  } else {
    a->pf.result[0] = '\0';
  }
  char err[PATH_MAX + 128];
  fprintf(stderr,
          "trun: --preflight: this node waits as a spare: running the local preflight on its %d GPU(s) "
          "while it waits (the all-ranks one ran at the job's first round)\n",
          ngpu);
  a->pf.t0 = trun_mono_s();
  if (trun_preflight_local_start(a->env, a->cfg, ngpu, a->pf.result, &a->pf.pid, err, sizeof(err)) < 0) {
    /* trun's own installation, not this node's GPUs: said, and the spare stays. */
    trun_warn("--preflight: the local preflight did not start: %s; the spare waits without it", err);
    if (a->pf.result[0]) unlink(a->pf.result);
    a->pf.local = TRUN_PF_LOCAL_SKIPPED;
    snprintf(a->pf.local_verdict, sizeof(a->pf.local_verdict), "did not start");
    return;
  }
  a->pf.local = TRUN_PF_LOCAL_RUNNING;
}

int trun__agent_preflight_round(agent *a, trun_pf_rank_env rank_env) {
  if (!a->cfg->preflight) return 0;
  int first = a->pf.rounds++ == 0;
  if (a->pf.local == TRUN_PF_LOCAL_RUNNING) {
    fprintf(stderr,
            "trun: --preflight: the local preflight started while this node waited still runs: "
            "its workers start when it ends\n");
    local_poll(a, 1);
  }
  if (a->health.unhealthy) return -1;
  if (!first) return 0;
  if (trun_rdzv_info(a->rdzv)->round == 0) {
    trun_pf_outcome pf;
    int stop = trun_preflight_agent(a->env, a->cfg, trun_rdzv_info(a->rdzv), a->nproc,
                                    trun_rdzv_info(a->rdzv)->attempt, rank_env, a, &pf);
    trun_obs_preflight(a->obs, trun_rdzv_info(a->rdzv)->round, &pf);
    return stop ? -1 : 0;
  }
  fprintf(
      stderr,
      "trun: --preflight: node rank %d joined the job at rendezvous round %d: the all-ranks preflight ran at "
      "the job's first round without it (the other nodes run none now), skipped here; local part: %s\n",
      trun_rdzv_info(a->rdzv)->group_rank, trun_rdzv_info(a->rdzv)->round,
      a->pf.local == TRUN_PF_LOCAL_NONE ? "not run (this node did not wait as a spare)"
                                        : a->pf.local_verdict);
  return 0;
}

int trun__agent_preflight_reaped(agent *a, pid_t pid, int status) {
  if (a->pf.pid <= 0 || pid != a->pf.pid) return 0;
  a->pf.reaped = 1;
  a->pf.status = status;
  return 1;
}

void trun__agent_preflight_close(agent *a) {
  if (a->pf.pid <= 0) return;
  if (!a->pf.reaped) {
    kill(-a->pf.pid, SIGKILL);
    kill(a->pf.pid, SIGKILL);
    waitpid(a->pf.pid, NULL, 0);
  }
  a->pf.pid = 0;
  if (a->pf.result[0]) unlink(a->pf.result);
}
