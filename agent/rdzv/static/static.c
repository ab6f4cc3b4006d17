/* The static backend (agent/rdzv/rdzv_int.h), also --standalone: node rank 0 hosts the store (a private
 * one on a free port for a single node), every node knows the node count; each round every node joins
 * ("joined", "all_joined"), the host clears the last attempt's worker keys and says "go", and the nodes
 * read each other's worker counts to number the global ranks. A round ends for all through the end key
 * (rdzv_end.c). */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <uv.h>

#include "agent/rdzv/rdzv_int.h"

/* join_timeout (or torchrun's older timeout) in ms; 900 s by default, as torchrun's static rendezvous. */
static int join_timeout_ms(const trun_config *cfg) {
  double s = trun__rdzv_conf_seconds(cfg, "join_timeout", 0);
  if (s == 0) s = trun__rdzv_conf_seconds(cfg, "timeout", 900);
  return (int)s * 1000;
}

/* What the wait for the store has: who this node is and who serves the store. */
static void static_store_have(trun_rdzv *r) {
  snprintf(r->wait.have, sizeof(r->wait.have), "this is node rank %d of %d; node rank 0 serves the store",
           r->info.group_rank, r->info.group_world_size);
}

static int static_init(trun_rdzv *r, char *err, size_t errlen) {
  const trun_config *cfg = r->cfg;
  int standalone = cfg->standalone || cfg->endpoint_port == 0;
  r->info.group_rank = standalone ? 0 : cfg->node_rank;
  r->info.group_world_size = standalone ? 1 : cfg->max_nodes;

  int port = cfg->endpoint_port;
  const char *connect_host = cfg->endpoint_host;
  if (r->info.group_rank == 0) {
    int rc =
        trun_store_acl_start(r->info.group_world_size == 1, standalone ? r->host_addr : cfg->endpoint_host,
                             port, cfg->store_threads, trun__rdzv_guard_server, r, &r->host, &port);
    if (rc < 0) {
      snprintf(err, errlen,
               "node rank 0 cannot serve the rendezvous store on port %d: %s; free the port or pick "
               "another with --master-port",
               cfg->endpoint_port, uv_strerror(rc));
      return -1;
    }
    connect_host = trun_store_host_addr(r->host);
    trun_debug("serving the store on port %d", port);
  }
  trun__rdzv_static_master_addr(cfg, r->host_addr, r->info.master_addr, sizeof(r->info.master_addr));
  r->info.master_port = port;

  snprintf(r->store_addr, sizeof(r->store_addr), "%s", connect_host);
  r->store_port = port;
  trun_client_opts o; /* quiet: waiting for node rank 0 is normal; a real time-out is reported below */
  trun__rdzv_agent_opts(r, join_timeout_ms(cfg), &o);
  r->wait_have = static_store_have;
  int rc = trun__rdzv_connect_polling(r, &o, o.timeout_ms);
  if (rc == -EINTR) {
    snprintf(err, errlen, "interrupted while reaching the rendezvous store at %s:%d%s%s%s", connect_host,
             port, r->wait.cause[0] ? " (last failure: " : "", r->wait.cause, r->wait.cause[0] ? ")" : "");
    trun__rdzv_close_stores(r);
    return -1;
  }
  if (rc < 0) {
    snprintf(err, errlen,
             "cannot reach the rendezvous store at %s:%d: %s; is node rank 0 up and the port open?%s%s",
             connect_host, port, strerror(-rc), r->wait.cause[0] ? " Last failure: " : "", r->wait.cause);
    trun__rdzv_close_stores(r);
    return -1;
  }
  return 0;
}

/* What a round's wait has (trun__rdzv_wait_begin): which nodes joined (their host/<g> keys) and the node
 * ranks still missing, at most a few of each by name. */
static void static_have(trun_rdzv *r) {
  enum { NAMED = 8 };
  int world = r->info.group_world_size, joined = 0, nmissing = 0, nnamed = 0;
  char k[512], names[400] = "", missing[200] = "";
  size_t nl = 0, ml = 0;
  for (int g = 0; g < world; g++) {
    snprintf(k, sizeof(k), "/trun/%s/r%d/host/%d", r->cfg->run_id, r->info.round, g);
    trun_slice ks = trun_str(k);
    int rc = trun_client_check(r->client, 1, &ks);
    if (rc < 0) return; /* the store is gone: the wait itself says so */
    if (rc == 1) {
      joined++;
      trun_buf v = {0};
      if (nnamed++ < NAMED && nl < sizeof(names) && trun_client_get(r->client, ks, &v, 1000) == 0)
        nl += (size_t)snprintf(names + nl, sizeof(names) - nl, "%snode %d (%.*s)", nl ? ", " : "", g,
                               (int)(v.len < 200 ? v.len : 200), (const char *)v.data);
      trun_buf_free(&v);
    } else if (nmissing++ < NAMED * 4 && ml < sizeof(missing)) {
      ml += (size_t)snprintf(missing + ml, sizeof(missing) - ml, "%s%d", ml ? ", " : "", g);
    }
  }
  snprintf(r->wait.have, sizeof(r->wait.have), "%d of %d nodes joined%s%s%s; missing node ranks: %s%s",
           joined, world, joined ? ": " : "", names, nnamed > NAMED ? ", ..." : "", missing,
           nmissing > NAMED * 4 ? ", ..." : "");
}

/* This node's entries of the round (its worker count, its address for the job's failure report should it be
 * lost (trun_rdzv_node_end), its join time for trun --rdzv-status (rdzv_status.c)) and its count in
 * "joined"; the last to join marks "all_joined". 0 or <0 (store). */
static int announce(trun_rdzv *r, int round) {
  char k[512], v[32];
  int g = r->info.group_rank, rc;
  snprintf(k, sizeof(k), "/trun/%s/r%d/nproc/%d", r->cfg->run_id, round, g);
  snprintf(v, sizeof(v), "%d", r->nproc);
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str(v))) < 0) return rc;
  snprintf(k, sizeof(k), "/trun/%s/r%d/host/%d", r->cfg->run_id, round, g);
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str(r->host_addr))) < 0) return rc;
  snprintf(k, sizeof(k), "/trun/%s/r%d/joined_at/%d", r->cfg->run_id, round, g);
  snprintf(v, sizeof(v), "%.3f", trun_wall_s());
  if ((rc = trun_client_set(r->client, trun_str(k), trun_str(v))) < 0) return rc;
  int64_t joined;
  trun__rdzv_round_key(r, round, "joined", k, sizeof(k));
  if ((rc = trun_client_add(r->client, trun_str(k), 1, &joined)) < 0) return rc;
  if (joined != r->info.group_world_size) return 0;
  trun__rdzv_round_key(r, round, "all_joined", k, sizeof(k));
  return trun_client_set(r->client, trun_str(k), trun_str("1"));
}

/* Global ranks: group ranks in order, each node's workers in local-rank order, from every node's worker
 * count. 0, -ENOMEM, other <0 (store). */
static int global_ranks(trun_rdzv *r, int round, int timeout) {
  int world = r->info.group_world_size;
  char **names = calloc((size_t)world, sizeof(char *));
  trun_slice *keys = calloc((size_t)world, sizeof(*keys));
  trun_buf *vals = calloc((size_t)world, sizeof(*vals));
  int built = 0;
  while (names && keys && vals && built < world &&
         asprintf(&names[built], "/trun/%s/r%d/nproc/%d", r->cfg->run_id, round, built) >= 0) {
    keys[built] = trun_str(names[built]);
    built++;
  }
  int rc = built < world ? -ENOMEM : trun_client_multi_get(r->client, (size_t)world, keys, vals, timeout);
  int base = 0, total = 0;
  for (int g = 0; g < built; g++) {
    int n = 0;
    if (rc == 0) {
      char tmp[32];
      size_t len = vals[g].len < sizeof(tmp) - 1 ? vals[g].len : sizeof(tmp) - 1;
      memcpy(tmp, vals[g].data, len);
      tmp[len] = '\0';
      n = atoi(tmp);
    }
    if (g < r->info.group_rank) base += n;
    total += n;
    trun_buf_free(&vals[g]);
    free(names[g]);
  }
  free(names), free(keys), free(vals);
  if (rc < 0) return rc;
  r->info.base_rank = r->info.role_base_rank = base;
  r->info.world_size = r->info.role_world_size = total;
  return 0;
}

static int static_round(trun_rdzv *r, int round, char *err, size_t errlen) {
  r->info.round = round;
  r->info.round_id = round;
  snprintf(r->key_space, sizeof(r->key_space), "/trun/%s/r%d", r->cfg->run_id, round);
  char k[512];
  int world = r->info.group_world_size, rc, waiting = 0;
  int timeout = join_timeout_ms(r->cfg);
  if ((rc = announce(r, round)) < 0) goto store_failed;
  waiting = trun__rdzv_wait_begin(r, "round", timeout / 1000.0, "join_timeout", static_have,
                                  "the other nodes of rendezvous round %d (static, %d nodes)", round, world);
  if (r->host) {
    trun__rdzv_round_key(r, round, "all_joined", k, sizeof(k));
    rc = trun__rdzv_wait_key(r, k, timeout);
    if (rc == -ETIMEDOUT) {
      static_have(r);
      trun__rdzv_wait_end(r, waiting);
      snprintf(err, errlen,
               "round %d: %s within %d s; check the other nodes' --master-addr/--master-port and that they "
               "started",
               round, r->wait.have, timeout / 1000);
      return -1;
    }
    if (rc < 0) goto store_failed;
    if ((rc = trun__rdzv_wipe_worker_keys(r)) < 0) goto store_failed;
    trun__rdzv_round_key(r, round, "go", k, sizeof(k));
    if ((rc = trun_client_set(r->client, trun_str(k), trun_str("1"))) < 0) goto store_failed;
  }
  trun__rdzv_round_key(r, round, "go", k, sizeof(k));
  rc = trun__rdzv_wait_key(r, k, timeout);
  if (rc == -ETIMEDOUT) static_have(r);
  trun__rdzv_wait_end(r, waiting);
  waiting = 0;
  if (rc == -ETIMEDOUT) {
    snprintf(err, errlen, "round %d: the other nodes did not all join within %d s (%s)", round,
             timeout / 1000, r->wait.have);
    return -1;
  }
  if (rc < 0) goto store_failed;
  if ((rc = global_ranks(r, round, timeout)) == -ENOMEM) {
    snprintf(err, errlen, "out of memory for %d nodes", world);
    return -1;
  }
  if (rc == 0) return 0;

store_failed:
  trun__rdzv_wait_end(r, waiting);
  if (rc == -EINTR) {
    static_have(r);
    snprintf(err, errlen, "round %d: interrupted by a signal while waiting for the other nodes (%s)", round,
             r->wait.have);
    return -1;
  }
  snprintf(err, errlen, "round %d: rendezvous store at %s:%d failed: %s", round,
           r->host ? trun_store_host_addr(r->host) : r->cfg->endpoint_host, r->info.master_port,
           strerror(-rc));
  return -1;
}

static int static_ends_by_key(const trun_rdzv *r) { return r->info.group_world_size > 1; }

static void static_finish(trun_rdzv *r, int code, int signaled) {
  if (r->client)
    trun__rdzv_leave(r, r->info.round, code == 0 ? trun__rdzv_exit_barrier_ms(r) : 5000,
                     trun__rdzv_host_wait_ms(code, signaled));
}

const trun_rdzv_ops trun__rdzv_static = {
    .name = "static",
    .init = static_init,
    .next_round = static_round,
    .publish_addr = trun__rdzv_publish_addr,
    .admit_round = trun__rdzv_admit_published,
    .ends_by_key = static_ends_by_key,
    .finish = static_finish,
    .close = trun__rdzv_close_stores,
};
