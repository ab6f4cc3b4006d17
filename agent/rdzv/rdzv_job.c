/* The job's record in its rendezvous store (agent/rdzv/rdzv_int.h): /trun/<run_id>/job, JSON, written once
 * per job by its first trun agent (compare-and-set from absent) so that trun --rdzv-status (rdzv_status.c)
 * reads the job's backend and size from the store instead of trusting its own command line, which may not
 * repeat the job's. An agent started with another backend or size than the record says so: such a node's
 * rendezvous never completes (a static job of 2 whose node 1 was told 3 waits for a node that never comes).
 *
 * Readable without the job's token (reads stay open, LIST does not show it to strangers): it holds what the
 * job's command lines say about its shape (backend, --nnodes, --nproc-per-node, torch_version), never the
 * token or any other --rdzv-conf value. Written with the token where the store guards /trun/<run_id>/. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdzv_int.h"

#define JOB_MAX_BYTES 4096 /* a record trun writes is a few hundred bytes */
#define JOB_MAX_NODES 1000000

const char *trun__rdzv_backend_text(trun_rdzv_backend b) {
  return b == TRUN_RDZV_C10D ? "c10d" : b == TRUN_RDZV_TRUN ? "trun" : "static";
}

void trun__rdzv_job_key(const char *run_id, char *out, size_t len) {
  snprintf(out, len, "/trun/%s/job", run_id);
}

/* r's job as a record (NULL: out of memory), free() it. */
static char *job_json(const trun_rdzv *r) {
  const trun_config *cfg = r->cfg;
  char tv[16] = "";
  if (cfg->rdzv_conf) trun_config_conf_get(cfg->rdzv_conf, "torch_version", tv, sizeof(tv));
  json_t *j = json_pack("{s:s,s:i,s:i,s:s,s:s,s:s,s:s,s:I,s:f}", "backend", r->be->name, "min_nodes",
                        cfg->min_nodes, "max_nodes", cfg->max_nodes, "nproc_per_node",
                        cfg->nproc_spec ? cfg->nproc_spec : "", "torch_version", tv, "run_id", cfg->run_id,
                        "host", r->host_addr, "pid", (json_int_t)getpid(), "at", trun_wall_s());
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  return s;
}

int trun__rdzv_job_parse(const void *data, size_t n, const char *run_id, trun__rdzv_job *out, char *why,
                         size_t whylen) {
  memset(out, 0, sizeof(*out));
  if (n > JOB_MAX_BYTES) {
    snprintf(why, whylen, "%zu bytes, more than a record trun writes", n);
    return -EPROTO;
  }
  json_t *o = json_loadb((const char *)data, n, 0, NULL);
  const char *be = json_string_value(json_object_get(o, "backend"));
  const char *rid = json_string_value(json_object_get(o, "run_id"));
  json_t *mn = json_object_get(o, "min_nodes"), *mx = json_object_get(o, "max_nodes");
  const char *np = json_string_value(json_object_get(o, "nproc_per_node"));
  const char *tv = json_string_value(json_object_get(o, "torch_version"));
  int rc = -EPROTO;
  if (!json_is_object(o))
    snprintf(why, whylen, "not a JSON object");
  else if (!be || (strcmp(be, "static") && strcmp(be, "c10d") && strcmp(be, "trun")))
    snprintf(why, whylen, "its backend is not static, c10d or trun");
  else if (!json_is_integer(mn) || !json_is_integer(mx) || json_integer_value(mn) < 1 ||
           json_integer_value(mx) < json_integer_value(mn) || json_integer_value(mx) > JOB_MAX_NODES)
    snprintf(why, whylen, "its min_nodes / max_nodes are not 1 <= MIN <= MAX <= %d", JOB_MAX_NODES);
  else if (!rid || strcmp(rid, run_id) != 0)
    snprintf(why, whylen, "it names another run id");
  else if (np && (strlen(np) >= sizeof(out->nproc) || !trun__rdzv_name_ok(np, "", 1)))
    snprintf(why, whylen, "its nproc_per_node is not a number, gpu, cpu or auto");
  else if (tv && (strlen(tv) >= sizeof(out->torch_version) || !trun__rdzv_name_ok(tv, ".", 1)))
    snprintf(why, whylen, "its torch_version is not a version");
  else
    rc = 0;
  if (rc == 0) {
    out->backend = strcmp(be, "c10d") == 0   ? TRUN_RDZV_C10D
                   : strcmp(be, "trun") == 0 ? TRUN_RDZV_TRUN
                                             : TRUN_RDZV_STATIC;
    out->min_nodes = (int)json_integer_value(mn);
    out->max_nodes = (int)json_integer_value(mx);
    snprintf(out->nproc, sizeof(out->nproc), "%s", np ? np : "");
    snprintf(out->torch_version, sizeof(out->torch_version), "%s", tv ? tv : "");
    trun__rdzv_escape(json_string_value(json_object_get(o, "host")), out->host, sizeof(out->host));
    json_t *pid = json_object_get(o, "pid"), *at = json_object_get(o, "at");
    out->pid = json_is_integer(pid) ? (long long)json_integer_value(pid) : 0;
    out->at = json_is_number(at) ? json_number_value(at) : 0;
  }
  json_decref(o);
  return rc;
}

int trun__rdzv_job_read(trun_client *c, const char *run_id, trun__rdzv_job *out, char *why, size_t whylen) {
  char k[200];
  trun__rdzv_job_key(run_id, k, sizeof(k));
  trun_slice ks = trun_str(k);
  int rc = trun_client_check(c, 1, &ks);
  if (rc <= 0) return rc;
  trun_buf b = {0};
  rc = trun_client_get(c, ks, &b, 5000);
  if (rc == -EPROTO)
    rc = -EIO; /* the store's answer, not the record, made no sense: -EPROTO is the record's */
  if (rc == 0) rc = trun__rdzv_job_parse(b.data, b.len, run_id, out, why, whylen) == 0 ? 1 : -EPROTO;
  trun_buf_free(&b);
  return rc;
}

void trun__rdzv_job_publish(trun_rdzv *r) {
  const trun_config *cfg = r->cfg;
  if (r->client == NULL || cfg->standalone || cfg->endpoint_port == 0) return; /* a private store */
  char k[200], *rec = job_json(r);
  if (rec == NULL) return;
  trun__rdzv_job_key(cfg->run_id, k, sizeof(k));
  trun_buf b = {0};
  int rc = trun_client_compare_set(r->client, trun_str(k), trun_str(""), trun_str(rec), &b);
  trun__rdzv_job theirs;
  char why[128];
  if (rc < 0) {
    trun_debug("could not publish job '%s' in the rendezvous store (%s): %s", cfg->run_id, k, strerror(-rc));
  } else if (b.len != strlen(rec) || memcmp(b.data, rec, b.len) != 0) {
    /* Another agent's record stands: the same job unless its shape differs from this node's. */
    if (trun__rdzv_job_parse(b.data, b.len, cfg->run_id, &theirs, why, sizeof(why)) < 0)
      trun_debug("job '%s''s record in the rendezvous store is not one trun writes (%s)", cfg->run_id, why);
    else if (theirs.backend != cfg->backend || theirs.min_nodes != cfg->min_nodes ||
             theirs.max_nodes != cfg->max_nodes)
      trun_warn(
          "job '%s' was started as --rdzv-backend %s --nnodes %d:%d (by %s pid %lld, as its rendezvous "
          "store says), this node as --rdzv-backend %s --nnodes %d:%d: give every node the same "
          "--rdzv-backend and --nnodes, or this rendezvous may never complete",
          cfg->run_id, trun__rdzv_backend_text(theirs.backend), theirs.min_nodes, theirs.max_nodes,
          theirs.host, theirs.pid, r->be->name, cfg->min_nodes, cfg->max_nodes);
  }
  trun_buf_free(&b);
  free(rec);
}

int trun_rdzv_publish_hang(trun_rdzv *r, const char *line) {
  const trun_config *cfg = r->cfg;
  if (r->client == NULL || cfg->standalone || cfg->endpoint_port == 0) return 0; /* a private store */
  char k[200], v[1024];
  snprintf(k, sizeof(k), "/trun/%s/hang", cfg->run_id);
  snprintf(v, sizeof(v), "%s", line); /* cut: --rdzv-status shows at most this much */
  int rc = trun_client_set(r->client, trun_str(k), trun_str(v));
  if (rc < 0)
    trun_debug("could not publish the hang of job '%s' in the rendezvous store (%s): %s", cfg->run_id, k,
               strerror(-rc));
  return rc;
}
