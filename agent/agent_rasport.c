/* The job's own NCCL RAS client address on this node (agent/agent_int.h). Every NCCL (>= 2.24) process binds
 * its RAS client port, NCCL_RAS_ADDR (default localhost:28028), with SO_REUSEADDR and SO_REUSEPORT, so every
 * NCCL process of a user on a host shares it and the kernel hands each connection to one of them: two jobs
 * on one host (or a rank left over from an earlier job) answer each other's queries. Unless the user set
 * NCCL_RAS_ADDR, each agent gives its workers a loopback port of their own, held for the agent's life
 * (agent/proc/portheld.h): the workers' RAS threads listen on it beside the held socket, no other user's
 * process can, and connections go to listeners only, so the agent's queries reach its workers. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/hang/hang.h"
#include "agent/proc/proc.h"
#include "agent_int.h"

int trun__agent_ras_port(agent *a, int *fd) {
  *fd = -1;
  const char *given = trun_env_get(a->env, "NCCL_RAS_ADDR");
  if (given) {
    trun_debug("hang detection: NCCL_RAS_ADDR=%s as given: the workers' RAS is asked there", given);
    return 0;
  }
  unsigned port = 0;
  const char *step = NULL;
  int s = trun_port_hold(&port, &step);
  if (s < 0) {
    /* No loopback (a network namespace without lo up): NCCL's default, shared with other jobs on the host. */
    trun_warn(
        "hang detection: cannot reserve a loopback port for the workers' NCCL RAS (%s: %s); they use "
        "NCCL's default %s, which other jobs on this host share; set NCCL_RAS_ADDR=127.0.0.1:<free "
        "port> to give the job its own",
        step, strerror(-s), TRUN_RAS_DEFAULT_ADDR);
    return 0;
  }
  char addr[32];
  snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
  if (trun_strv_setenv(&a->env, "NCCL_RAS_ADDR", addr) < 0) {
    trun_error("out of memory setting NCCL_RAS_ADDR");
    close(s);
    return -1;
  }
  *fd = s;
  trun_debug("hang detection: the workers' NCCL RAS listens on %s (NCCL_RAS_ADDR, this job's own port)",
             addr);
  return 0;
}
