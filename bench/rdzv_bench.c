/* trun-rdzv-bench: many rendezvous agents in one process (one thread and one store connection each) join one
 * rendezvous on a TCPStore, with the `trun` backend or the c10d (torchelastic) algorithm. Checks the result
 * (every agent got a distinct group rank 0..n-1 and the same world size) and prints the time from the last
 * agent's join to the last assignment, and the store traffic the agents counted.
 *
 *   trun-rdzv-bench --target HOST:PORT --agents N [--mode trun|c10d] [--min M] [--run-id ID]
 *
 * Output: one line `rdzv mode=<m> agents=<n> seconds=<s> total_seconds=<t> ops=<o> payload_bytes=<b>`.
 * Exit: 0 ok, 1 a join failed or the ranks are wrong, 2 bad arguments. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "agent/rdzv/c10d/dynamic.h"
#include "agent/rdzv/trun/fast.h"
#include "store/client.h"

typedef struct {
  int id;
  const char *host;
  int port;
  int c10d;
  int n, min;
  const char *run_id;
  pthread_barrier_t *start;
  double t_join, t_done;
  int rank, world, rc;
  uint64_t ops, bytes;
  char err[768];
} agent_arg;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *agent_main(void *p) {
  agent_arg *a = p;
  trun_client_opts o;
  trun_client_opts_default(&o);
  o.host = a->host;
  o.port = a->port;
  o.key_prefix = "";
  o.timeout_ms = 600000;
  o.connect_timeout_ms = 60000;
  trun_client *c = NULL;
  a->rc = trun_client_connect(&o, &c);
  pthread_barrier_wait(a->start);
  if (a->rc < 0) {
    snprintf(a->err, sizeof(a->err), "connect: %s", strerror(-a->rc));
    return NULL;
  }
  char addr[64];
  snprintf(addr, sizeof(addr), "bench-node-%05d", a->id);
  a->t_join = now();
  if (a->c10d) {
    trun_dyn_settings s = {.min_nodes = a->min,
                           .max_nodes = a->n,
                           .join_timeout_us = 600000000,
                           .last_call_us = 30000000,
                           .close_timeout_us = 30000000,
                           .heartbeat_timeout_us = 5000000,
                           .keep_alive_us = 5000000,
                           .keep_alive_max_attempt = 3,
                           .read_timeout_ms = 600000};
    trun_rdzv_layout lay = {TRUN_RDZV_KEY_ADDR, true, TRUN_RDZV_TZ_AWARE, 4};
    trun_dyn d;
    int64_t round = 0;
    a->rc = trun_dyn_init(&d, c, a->run_id, addr, getpid(), a->id, &s, &lay);
    if (a->rc == 0) a->rc = trun_dyn_next(&d, &a->rank, &a->world, &round);
    if (a->rc < 0) snprintf(a->err, sizeof(a->err), "%s", d.err);
    a->ops = d.ops;
    a->bytes = d.bytes_in + d.bytes_out;
    trun_dyn_free(&d);
  } else {
    trun_fast_settings s = {.min_nodes = a->min,
                            .max_nodes = a->n,
                            .join_timeout_ms = 600000,
                            .last_call_ms = 30000,
                            .keep_alive_ms = 5000,
                            .keep_alive_max_attempt = 3};
    trun_fast f;
    trun_fast_init(&f, c, a->run_id, addr, getpid(), 1, -1, &s);
    a->rc = trun_fast_join(&f);
    if (a->rc < 0) snprintf(a->err, sizeof(a->err), "%s", f.err);
    a->rank = f.group_rank;
    a->world = f.group_world;
    a->ops = f.ops;
    a->bytes = f.bytes_in + f.bytes_out;
  }
  a->t_done = now();
  trun_client_close(c);
  return NULL;
}

static int usage(void) {
  fprintf(
      stderr,
      "usage: trun-rdzv-bench --target HOST:PORT --agents N [--mode trun|c10d] [--min M] [--run-id ID]\n");
  return 2;
}

int main(int argc, char **argv) {
  char host[256] = "";
  int port = 0, n = 0, min = -1, c10d = 0;
  const char *run_id = "bench";
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--target") == 0 && v) {
      if (trun_client_parse_target(v, host, sizeof(host), &port) < 0) return usage();
      i++;
    } else if (strcmp(argv[i], "--agents") == 0 && v) {
      n = atoi(v), i++;
    } else if (strcmp(argv[i], "--min") == 0 && v) {
      min = atoi(v), i++;
    } else if (strcmp(argv[i], "--mode") == 0 && v) {
      if (strcmp(v, "c10d") == 0)
        c10d = 1;
      else if (strcmp(v, "trun") != 0)
        return usage();
      i++;
    } else if (strcmp(argv[i], "--run-id") == 0 && v) {
      run_id = v, i++;
    } else {
      return usage();
    }
  }
  if (!host[0] || port <= 0 || n < 1 || n > 100000) return usage();
  if (min < 0) min = n;
  if (min < 1 || min > n) return usage();
  /* one connection per agent */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
    rl.rlim_cur = rl.rlim_max < (rlim_t)n + 64 ? rl.rlim_max : (rlim_t)n + 64;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  agent_arg *args = calloc((size_t)n, sizeof(*args));
  pthread_t *th = calloc((size_t)n, sizeof(*th));
  pthread_barrier_t start;
  if (args == NULL || th == NULL || pthread_barrier_init(&start, NULL, (unsigned)n) != 0) {
    fprintf(stderr, "trun-rdzv-bench: out of memory for %d agents\n", n);
    free(args);
    free(th);
    return 1;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  for (int i = 0; i < n; i++) {
    args[i] = (agent_arg){.id = i,
                          .host = host,
                          .port = port,
                          .c10d = c10d,
                          .n = n,
                          .min = min,
                          .run_id = run_id,
                          .start = &start};
    int rc = pthread_create(&th[i], &attr, agent_main, &args[i]);
    if (rc != 0) {
      fprintf(stderr, "trun-rdzv-bench: pthread_create for agent %d: %s; lower --agents or raise ulimit -u\n",
              i, strerror(rc));
      return 1;
    }
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  double first = 1e300, last_join = 0, last_done = 0;
  uint64_t ops = 0, bytes = 0;
  int bad = 0;
  char *seen = calloc((size_t)n, 1);
  for (int i = 0; i < n; i++) {
    agent_arg *a = &args[i];
    if (a->rc < 0) {
      if (bad++ < 5) fprintf(stderr, "trun-rdzv-bench: agent %d: %s\n", i, a->err);
      continue;
    }
    if (a->world != n || a->rank < 0 || a->rank >= n || (seen && seen[a->rank]++)) {
      if (bad++ < 5) fprintf(stderr, "trun-rdzv-bench: agent %d got rank %d of %d\n", i, a->rank, a->world);
      continue;
    }
    if (a->t_join < first) first = a->t_join;
    if (a->t_join > last_join) last_join = a->t_join;
    if (a->t_done > last_done) last_done = a->t_done;
    ops += a->ops;
    bytes += a->bytes;
  }
  free(seen);
  if (bad) {
    fprintf(stderr, "trun-rdzv-bench: %d of %d agents failed\n", bad, n);
    return 1;
  }
  printf("rdzv mode=%s agents=%d seconds=%.4f total_seconds=%.4f ops=%llu payload_bytes=%llu\n",
         c10d ? "trun-c10d" : "trun-fast", n, last_done - last_join, last_done - first,
         (unsigned long long)ops, (unsigned long long)bytes);
  free(args);
  free(th);
  return 0;
}
