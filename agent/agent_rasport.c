/* The job's own NCCL RAS client address on this node (agent/agent_int.h). Every NCCL (>= 2.24) process binds
 * its RAS client port, NCCL_RAS_ADDR (default localhost:28028), with SO_REUSEADDR and SO_REUSEPORT, so every
 * NCCL process of a user on a host shares it and the kernel hands each connection to one of them: two jobs
 * on one host (or a rank left over from an earlier job) answer each other's queries. Unless the user set
 * NCCL_RAS_ADDR, each agent gives its workers a loopback port of their own: it binds 127.0.0.1:0 with the
 * same two options and never listens on it. That socket holds the port for the agent's life: the kernel
 * hands it to no other ephemeral bind, and a plain bind or another user's (SO_REUSEPORT shares a port
 * between sockets of one user only) is refused, while the workers' RAS threads, the agent's own user, bind
 * and listen on it beside it. Connections go to listeners only, so the agent's queries reach its workers. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/hang/hang.h"
#include "agent_int.h"

int trun__agent_ras_port(agent *a, int *fd) {
  *fd = -1;
  const char *given = trun_env_get(a->env, "NCCL_RAS_ADDR");
  if (given) {
    trun_debug("hang detection: NCCL_RAS_ADDR=%s as given: the workers' RAS is asked there", given);
    return 0;
  }
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof(sin);
  const char *step = NULL;
  if (s < 0)
    step = "socket";
  else if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
    step = "setsockopt(SO_REUSEADDR)";
  else if (setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
    step = "setsockopt(SO_REUSEPORT)";
  else if (bind(s, (struct sockaddr *)&sin, sizeof(sin)) < 0)
    step = "bind(127.0.0.1:0)";
  else if (getsockname(s, (struct sockaddr *)&sin, &sl) < 0)
    step = "getsockname";
  if (step) {
    /* No loopback (a network namespace without lo up): NCCL's default, shared with other jobs on the host. */
    trun_warn(
        "hang detection: cannot reserve a loopback port for the workers' NCCL RAS (%s: %s); they use "
        "NCCL's default %s, which other jobs on this host share; set NCCL_RAS_ADDR=127.0.0.1:<free "
        "port> to give the job its own",
        step, strerror(errno), TRUN_RAS_DEFAULT_ADDR);
    if (s >= 0) close(s);
    return 0;
  }
  char addr[32];
  snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)ntohs(sin.sin_port));
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
