/* The GPUs' health facts read in the background (agent/discover/discover.h): a short-lived NVML child
 * (nvml_child.h) that runs the discovery into a shared mapping and says "D" on its pipe when done. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "discover.h"
#include "discover_internal.h"
#include "nvml_child.h"

typedef struct {
  trun_node node;
  int rc;
  char err[512];
} probe_shared;

struct trun_gpu_probe {
  trun__nvml_child child;
  probe_shared *sh;
  char *const *envp;
  int done; /* the child said "D" */
};

static void body(void *arg) {
  trun_gpu_probe *p = arg;
  p->sh->rc = trun_discover_gpus_flags(&p->sh->node, p->envp,
                                       TRUN_GPU_HEALTH | TRUN_GPU_CACHE | TRUN_GPU_REFRESH | TRUN__GPU_HERE,
                                       p->sh->err, sizeof(p->sh->err));
  dprintf(3, "D\n");
}

trun_gpu_probe *trun_gpu_probe_start(const trun_node *base, char *const *envp) {
  trun_gpu_probe *p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  p->sh = mmap(NULL, sizeof(*p->sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p->sh == MAP_FAILED) {
    free(p);
    return NULL;
  }
  p->sh->node = *base;
  p->sh->rc = -1;
  snprintf(p->sh->err, sizeof(p->sh->err), "the GPU health probe ended without a result");
  p->envp = envp;
  if (trun__nvml_child_start(&p->child, body, p) < 0) {
    int saved = errno;
    munmap(p->sh, sizeof(*p->sh));
    free(p);
    errno = saved;
    return NULL;
  }
  return p;
}

int trun_gpu_probe_fd(const trun_gpu_probe *p) { return p->child.fd; }

static void on_line(void *arg, char *line) {
  trun_gpu_probe *p = arg;
  if (strcmp(line, "D") == 0) p->done = 1;
}

int trun_gpu_probe_poll(trun_gpu_probe *p, trun_node *out, int *rc, char *err, size_t errlen) {
  int ended = trun__nvml_child_read(&p->child, "the GPU health probe", on_line, p) < 0;
  if (p->done) {
    *out = p->sh->node;
    *rc = p->sh->rc;
    snprintf(err, errlen, "%s", p->sh->rc < 0 ? p->sh->err : "");
    return 1;
  }
  if (!ended) return 0;
  snprintf(err, errlen, "%s", p->child.err);
  return -1;
}

/* A child whose pipe reached its end has exited, and the agent's SIGCHLD handler may have reaped it: its pid
 * may be another process's by now, so only a child still holding the pipe is killed. */
void trun_gpu_probe_free(trun_gpu_probe *p) {
  if (p == NULL) return;
  char b[256];
  ssize_t r;
  while ((r = read(p->child.fd, b, sizeof(b))) > 0 || (r < 0 && errno == EINTR)) {
  }
  if (r == 0) {
    waitpid(p->child.pid, NULL, WNOHANG);
    close(p->child.fd);
  } else {
    trun__nvml_child_stop(&p->child);
  }
  munmap(p->sh, sizeof(*p->sh));
  free(p);
}
