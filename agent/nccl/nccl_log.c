/* NCCL INFO log reader (agent/nccl/nccl_log.h). Regular expressions from shared/spec/gpu-efa-nccl.md §4. */
#include "nccl_log.h"

#include <errno.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int channel, src, dst;
  char name[64];
} nl_conn;

typedef struct {
  int proc;
  long tid;
  char ptr[32];
  char commid[40];
  int rank, nranks, nnodes, local_ranks;
  int complete;
  int ordinal; /* creation order among the process's communicators with the same nranks */
  nl_conn *conns;
  int nconns, capconns;
} nl_pcomm;

typedef struct {
  char host[128];
  long pid;
} nl_proc;

struct trun_nccl_log {
  regex_t re_prefix, re_comm, re_init, re_chan, re_net, re_p2p;
  nl_proc *procs;
  int nprocs, capprocs;
  nl_pcomm *pcomms;
  int npcomms, cappcomms;
  int efa_devices, efa_seen;
};

static void *grow(void *p, int *cap, int need, size_t size) {
  if (need <= *cap) return p;
  int n = *cap ? *cap * 2 : 8;
  while (n < need) n *= 2;
  void *q = realloc(p, (size_t)n * size);
  if (q == NULL) return NULL;
  *cap = n;
  return q;
}

trun_nccl_log *trun_nccl_log_new(void) {
  trun_nccl_log *l = calloc(1, sizeof(*l));
  if (l == NULL) return NULL;
  int rc = regcomp(&l->re_prefix, "([^ :\\[]+):([0-9]+):([0-9]+) \\[[0-9]+\\] NCCL INFO (.*)$", REG_EXTENDED);
  rc |= regcomp(&l->re_comm,
                "comm (0x[0-9a-fA-F]+) rank ([0-9]+) nRanks ([0-9]+) nNodes ([0-9]+) localRanks ([0-9]+)",
                REG_EXTENDED);
  rc |= regcomp(&l->re_init,
                "comm (0x[0-9a-fA-F]+) rank ([0-9]+) nranks ([0-9]+)(.* commId (0x[0-9a-fA-F]+))?.* - Init "
                "(START|COMPLETE)",
                REG_EXTENDED);
  rc |= regcomp(&l->re_chan,
                "Channel ([0-9]+)(/([0-9]+))? : ([0-9]+)\\[([0-9a-fA-F]+)\\] -> ([0-9]+)\\[([0-9a-fA-F]+)\\] "
                "(\\[(send|receive)\\] )?via (P2P|SHM|NET)/(.*)$",
                REG_EXTENDED);
  rc |=
      regcomp(&l->re_net, "^([^/]+)/([0-9]+)(\\(([0-9]+)\\))?(/GDRDMA)?(\\(PCI\\))?(/Shared)?", REG_EXTENDED);
  rc |=
      regcomp(&l->re_p2p, "^(CUMEM|MNNVL|IPC|direct pointer|indirect/[0-9]+\\[[0-9a-fA-F]+\\])(/read)?(/CE)?",
              REG_EXTENDED);
  if (rc != 0) {
    free(l);
    return NULL;
  }
  return l;
}

void trun_nccl_log_free(trun_nccl_log *l) {
  if (l == NULL) return;
  regfree(&l->re_prefix);
  regfree(&l->re_comm);
  regfree(&l->re_init);
  regfree(&l->re_chan);
  regfree(&l->re_net);
  regfree(&l->re_p2p);
  for (int i = 0; i < l->npcomms; i++) free(l->pcomms[i].conns);
  free(l->pcomms);
  free(l->procs);
  free(l);
}

void trun_nccl_log_set_efa(trun_nccl_log *l, int efa_devices) { l->efa_devices = efa_devices; }

static void sub(const char *s, const regmatch_t *m, char *out, size_t len) {
  out[0] = '\0';
  if (m->rm_so < 0) return;
  size_t n = (size_t)(m->rm_eo - m->rm_so);
  if (n >= len) n = len - 1;
  memcpy(out, s + m->rm_so, n);
  out[n] = '\0';
}

static long subl(const char *s, const regmatch_t *m) {
  char b[32];
  sub(s, m, b, sizeof(b));
  return strtol(b, NULL, 10);
}

static int find_proc(trun_nccl_log *l, const char *host, long pid) {
  for (int i = 0; i < l->nprocs; i++)
    if (l->procs[i].pid == pid && strcmp(l->procs[i].host, host) == 0) return i;
  nl_proc *p = grow(l->procs, &l->capprocs, l->nprocs + 1, sizeof(*p));
  if (p == NULL) return -1;
  l->procs = p;
  snprintf(p[l->nprocs].host, sizeof(p[l->nprocs].host), "%s", host);
  p[l->nprocs].pid = pid;
  return l->nprocs++;
}

/* The process's communicator with pointer ptr (created when missing; -1 out of memory). */
static int find_pcomm(trun_nccl_log *l, int proc, const char *ptr, long tid, int nranks) {
  for (int i = l->npcomms - 1; i >= 0; i--)
    if (l->pcomms[i].proc == proc && strcmp(l->pcomms[i].ptr, ptr) == 0) return i;
  nl_pcomm *c = grow(l->pcomms, &l->cappcomms, l->npcomms + 1, sizeof(*c));
  if (c == NULL) return -1;
  l->pcomms = c;
  nl_pcomm *n = &c[l->npcomms];
  memset(n, 0, sizeof(*n));
  n->proc = proc;
  n->tid = tid;
  snprintf(n->ptr, sizeof(n->ptr), "%s", ptr);
  n->rank = n->nnodes = n->local_ranks = -1;
  n->nranks = nranks;
  for (int i = 0; i < l->npcomms; i++)
    if (c[i].proc == proc && c[i].nranks == nranks) n->ordinal++;
  return l->npcomms++;
}

/* The communicator a channel line of (proc, tid) belongs to: same thread, else the process's latest. */
static int owner_pcomm(trun_nccl_log *l, int proc, long tid) {
  int latest = -1;
  for (int i = l->npcomms - 1; i >= 0; i--) {
    if (l->pcomms[i].proc != proc) continue;
    if (l->pcomms[i].tid == tid) return i;
    if (latest < 0) latest = i;
  }
  return latest;
}

static void transport_name(trun_nccl_log *l, const char *kind, const char *rest, char *out, size_t len) {
  regmatch_t m[8];
  char a[64];
  if (strcmp(kind, "NET") == 0 && regexec(&l->re_net, rest, 8, m, 0) == 0) {
    sub(rest, &m[1], a, sizeof(a));
    snprintf(out, len, "NET/%.40s%s", a, m[5].rm_so >= 0 ? "/GDRDMA" : "");
  } else if (strcmp(kind, "P2P") == 0 && regexec(&l->re_p2p, rest, 8, m, 0) == 0) {
    sub(rest, &m[1], a, sizeof(a));
    if (strncmp(a, "indirect/", 9) == 0) a[8] = '\0';
    snprintf(out, len, "P2P/%.40s%s%s", a, m[2].rm_so >= 0 ? "/read" : "", m[3].rm_so >= 0 ? "/CE" : "");
  } else {
    /* SHM/<send>/<recv> (or an unknown P2P / NET form): kept as NCCL wrote it, trailing blanks cut. */
    snprintf(out, len, "%.8s/%.48s", kind, rest);
    size_t n = strlen(out);
    while (n && (out[n - 1] == ' ' || out[n - 1] == '\r' || out[n - 1] == '\n')) out[--n] = '\0';
  }
}

void trun_nccl_log_feed_line(trun_nccl_log *l, const char *line) {
  char buf[2048];
  snprintf(buf, sizeof(buf), "%s", line);
  buf[strcspn(buf, "\r\n")] = '\0';
  /* NCCL writes ASCII; anything else (a corrupt or foreign line) becomes '?', so that host and transport
   * names stay valid JSON strings and are not dropped from the report. */
  for (unsigned char *c = (unsigned char *)buf; *c; c++)
    if (*c >= 0x7f || (*c < 0x20 && *c != '\t')) *c = '?';
  regmatch_t m[16];
  if (regexec(&l->re_prefix, buf, 16, m, 0) != 0) return;
  char host[128];
  sub(buf, &m[1], host, sizeof(host));
  long pid = subl(buf, &m[2]), tid = subl(buf, &m[3]);
  const char *msg = buf + m[4].rm_so;
  if (strstr(msg, "Selected provider is efa")) l->efa_seen = 1;
  int proc = find_proc(l, host, pid);
  if (proc < 0) return;
  char ptr[32], s[64];
  if (regexec(&l->re_comm, msg, 16, m, 0) == 0) {
    sub(msg, &m[1], ptr, sizeof(ptr));
    int c = find_pcomm(l, proc, ptr, tid, (int)subl(msg, &m[3]));
    if (c < 0) return;
    nl_pcomm *p = &l->pcomms[c];
    p->tid = tid;
    p->rank = (int)subl(msg, &m[2]);
    p->nnodes = (int)subl(msg, &m[4]);
    p->local_ranks = (int)subl(msg, &m[5]);
    return;
  }
  if (regexec(&l->re_init, msg, 16, m, 0) == 0) {
    sub(msg, &m[1], ptr, sizeof(ptr));
    int c = find_pcomm(l, proc, ptr, tid, (int)subl(msg, &m[3]));
    if (c < 0) return;
    nl_pcomm *p = &l->pcomms[c];
    p->rank = (int)subl(msg, &m[2]);
    if (m[5].rm_so >= 0) sub(msg, &m[5], p->commid, sizeof(p->commid));
    sub(msg, &m[6], s, sizeof(s));
    if (strcmp(s, "COMPLETE") == 0) p->complete = 1;
    return;
  }
  if (regexec(&l->re_chan, msg, 16, m, 0) == 0) {
    int c = owner_pcomm(l, proc, tid);
    if (c < 0) return; /* a channel line before any communicator line: nothing to attach it to */
    nl_pcomm *p = &l->pcomms[c];
    char kind[8];
    sub(msg, &m[10], kind, sizeof(kind));
    nl_conn cn;
    memset(&cn, 0, sizeof(cn));
    cn.channel = (int)subl(msg, &m[1]);
    cn.src = (int)subl(msg, &m[4]);
    cn.dst = (int)subl(msg, &m[6]);
    transport_name(l, kind, msg + m[11].rm_so, cn.name, sizeof(cn.name));
    nl_conn *a = grow(p->conns, &p->capconns, p->nconns + 1, sizeof(*a));
    if (a == NULL) return;
    p->conns = a;
    a[p->nconns++] = cn;
  }
}

int trun_nccl_log_feed_file(trun_nccl_log *l, const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -errno;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) >= 0) trun_nccl_log_feed_line(l, line);
  free(line);
  fclose(f);
  return 0;
}

/* ---- analysis ----------------------------------------------------------------------------------------- */

typedef struct {
  char key[64];
  int first; /* pcomm index */
  int *members;
  int nmembers;
} nl_group;

static void group_key(const nl_pcomm *p, char *out, size_t len) {
  if (p->commid[0])
    snprintf(out, len, "%s", p->commid);
  else
    snprintf(out, len, "n%d#%d", p->nranks, p->ordinal);
}

static const char *rank_host(const trun_nccl_log *l, const nl_group *g, int rank) {
  for (int i = 0; i < g->nmembers; i++) {
    const nl_pcomm *p = &l->pcomms[g->members[i]];
    if (p->rank == rank) return l->procs[p->proc].host;
  }
  return NULL;
}

static int is_net(const char *name) { return strncmp(name, "NET/", 4) == 0; }
static int is_socket(const char *name) { return strcmp(name, "NET/Socket") == 0; }

static void add_verdict(json_t *v, const char *text) {
  size_t i;
  json_t *e;
  json_array_foreach(v, i, e) if (strcmp(json_string_value(e), text) == 0) return;
  json_array_append_new(v, json_string(text));
}

/* Orders connections by (source, destination, transport) for the pairs list. */
static int conn_pair_cmp(const void *pa, const void *pb) {
  const nl_conn *a = pa, *b = pb;
  if (a->src != b->src) return a->src < b->src ? -1 : 1;
  if (a->dst != b->dst) return a->dst < b->dst ? -1 : 1;
  return strcmp(a->name, b->name);
}

/* [{"src", "dst", "transport", "channels"}]: the unique connections u grouped by peer pair and transport,
 * sorted by source rank, destination rank, transport. */
static json_t *pairs_json(const nl_conn *u, int nu) {
  json_t *pairs = json_array();
  nl_conn *s = nu > 0 ? malloc((size_t)nu * sizeof(*s)) : NULL;
  if (s == NULL) return pairs;
  memcpy(s, u, (size_t)nu * sizeof(*s));
  qsort(s, (size_t)nu, sizeof(*s), conn_pair_cmp);
  for (int i = 0; i < nu;) {
    int j = i;
    while (j < nu && s[j].src == s[i].src && s[j].dst == s[i].dst && strcmp(s[j].name, s[i].name) == 0) j++;
    json_array_append_new(pairs, json_pack("{s:i, s:i, s:s, s:i}", "src", s[i].src, "dst", s[i].dst,
                                           "transport", s[i].name, "channels", j - i));
    i = j;
  }
  free(s);
  return pairs;
}

/* What a group's members logged, merged: their nodes and local ranks (the first member's), Init COMPLETE
 * lines, distinct ranks, hosts, and their channel connections once each, in log order. */
typedef struct {
  int nnodes, local, complete, ranks_seen;
  json_t *hosts;
  nl_conn *u;
  int nu, capu;
} nl_merged;

static void merge_members(const trun_nccl_log *l, const nl_group *g, nl_merged *m) {
  m->nnodes = m->local = -1;
  for (int i = 0; i < g->nmembers; i++) {
    const nl_pcomm *p = &l->pcomms[g->members[i]];
    if (m->nnodes < 0) m->nnodes = p->nnodes;
    if (m->local < 0) m->local = p->local_ranks;
    m->complete += p->complete;
    int dup_rank = 0;
    for (int j = 0; j < i; j++) dup_rank |= l->pcomms[g->members[j]].rank == p->rank;
    if (!dup_rank && p->rank >= 0) m->ranks_seen++;
    const char *h = l->procs[p->proc].host;
    int seen = 0;
    size_t k;
    json_t *e;
    json_array_foreach(m->hosts, k, e) seen |= strcmp(json_string_value(e), h) == 0;
    if (!seen) json_array_append_new(m->hosts, json_string(h));
    for (int c = 0; c < p->nconns; c++) {
      const nl_conn *cn = &p->conns[c];
      int dup = 0;
      for (int j = 0; j < m->nu && !dup; j++)
        dup = m->u[j].channel == cn->channel && m->u[j].src == cn->src && m->u[j].dst == cn->dst;
      if (dup) continue;
      nl_conn *a = grow(m->u, &m->capu, m->nu + 1, sizeof(*m->u));
      if (a == NULL) continue;
      m->u = a;
      m->u[m->nu++] = *cn;
    }
  }
}

/* The verdicts on the group's network connections (u, nu): ranks of one host in different NCCL nodes (one
 * verdict per transport; *split counts them), TCP where EFA exists or at all, RDMA without GDRDMA. The
 * number of problems. */
static int net_verdicts(const trun_nccl_log *l, const nl_group *g, const nl_conn *u, int nu, json_t *verdicts,
                        int *split) {
  char text[512];
  int problems = 0, efa = l->efa_devices > 0 || l->efa_seen;
  for (int j = 0; j < nu; j++) {
    const char *n = u[j].name;
    if (!is_net(n)) continue;
    const char *hs = rank_host(l, g, u[j].src), *hd = rank_host(l, g, u[j].dst);
    if (hs && hd && strcmp(hs, hd) == 0) {
      snprintf(text, sizeof(text),
               "%s%s: GPUs split across pods (ranks %d and %d are on host %s but in different NCCL nodes; "
               "run one pod per node with --nproc-per-node = its GPUs)",
               TRUN_NCCL_V_SPLIT, n + 4, u[j].src, u[j].dst, hs);
      /* One verdict per transport: the first pair found names the problem. */
      int have = 0;
      size_t k;
      json_t *e;
      char pre[96];
      snprintf(pre, sizeof(pre), "%s%s:", TRUN_NCCL_V_SPLIT, n + 4);
      json_array_foreach(verdicts, k, e) have |= strncmp(json_string_value(e), pre, strlen(pre)) == 0;
      if (!have) add_verdict(verdicts, text);
      (*split)++, problems++;
      continue;
    }
    if (is_socket(n) && efa) {
      add_verdict(verdicts, TRUN_NCCL_V_EFA_UNUSED);
      problems++;
    } else if (is_socket(n)) {
      add_verdict(verdicts, "inter-node over NET/Socket (TCP, no RDMA network): expect a few GB/s");
      problems++;
    } else if (!strstr(n, "/GDRDMA")) {
      snprintf(text, sizeof(text),
               "inter-node over %s without GDRDMA: GPUDirect RDMA is off, data is staged through host memory",
               n);
      add_verdict(verdicts, text);
      problems++;
    }
  }
  return problems;
}

/* "healthy (<the transports used>)". */
static void healthy_verdict(json_t *transports, json_t *verdicts) {
  char text[512];
  int o = snprintf(text, sizeof(text), "%s (", TRUN_NCCL_V_HEALTHY);
  const char *k;
  json_t *e;
  int first = 1;
  json_object_foreach(transports, k, e) {
    o += snprintf(text + o, sizeof(text) - (size_t)o, "%s%s", first ? "" : ", ", k);
    first = 0;
    if (o >= (int)sizeof(text)) break;
  }
  if (o < (int)sizeof(text) - 1) snprintf(text + o, sizeof(text) - (size_t)o, ")");
  add_verdict(verdicts, text);
}

static json_t *group_json(const trun_nccl_log *l, const nl_group *g) {
  int nranks = l->pcomms[g->first].nranks;
  nl_merged m = {.hosts = json_array()};
  merge_members(l, g, &m);
  json_t *transports = json_object(), *verdicts = json_array();
  for (int j = 0; j < m.nu; j++) {
    json_t *c = json_object_get(transports, m.u[j].name);
    json_object_set_new(transports, m.u[j].name, json_integer(c ? json_integer_value(c) + 1 : 1));
  }
  int problems = 0, split = 0;
  if (m.nu == 0) {
    add_verdict(verdicts,
                "no channel connections logged (NCCL connects at the first collective: did the job run one? "
                "NCCL_DEBUG_SUBSYS needs INIT,P2P,NET)");
    problems++;
  }
  problems += net_verdicts(l, g, m.u, m.nu, verdicts, &split);
  for (int j = 0; j < m.nu; j++)
    if (strncmp(m.u[j].name, "SHM", 3) == 0) {
      add_verdict(verdicts,
                  "intra-node over SHM instead of P2P: GPU peer access is off (NCCL_P2P_DISABLE, "
                  "NCCL_P2P_LEVEL, or no P2P path between these GPUs)");
      problems++;
    }
  if (!split && nranks > 1 && m.nnodes == nranks && m.local == 1) {
    char text[512];
    snprintf(text, sizeof(text),
             "every rank is its own NCCL node (nNodes = nRanks = %d, localRanks 1): if ranks share a host, "
             "they are split across pods and NVLink / PCIe P2P is not used",
             nranks);
    add_verdict(verdicts, text);
    problems++;
  }
  if (problems == 0) healthy_verdict(transports, verdicts);
  json_t *pairs = pairs_json(m.u, m.nu);
  free(m.u);
  return json_pack("{s:s, s:i, s:i, s:i, s:i, s:o, s:i, s:o, s:o, s:o}", "id", g->key, "nranks", nranks,
                   "nnodes", m.nnodes, "local_ranks", m.local, "ranks_seen", m.ranks_seen, "hosts", m.hosts,
                   "init_complete", m.complete, "transports", transports, "pairs", pairs, "verdicts",
                   verdicts);
}

json_t *trun_nccl_log_json(trun_nccl_log *l) {
  nl_group *g = calloc((size_t)l->npcomms + 1, sizeof(*g));
  int ng = 0;
  json_t *comms = json_array();
  for (int i = 0; g && i < l->npcomms; i++) {
    char key[64];
    group_key(&l->pcomms[i], key, sizeof(key));
    int k = 0;
    while (k < ng && strcmp(g[k].key, key) != 0) k++;
    if (k == ng) {
      snprintf(g[k].key, sizeof(g[k].key), "%s", key);
      g[k].first = i;
      g[k].members = calloc((size_t)l->npcomms, sizeof(int));
      if (g[k].members == NULL) continue;
      ng++;
    }
    g[k].members[g[k].nmembers++] = i;
  }
  for (int k = 0; k < ng; k++) {
    json_array_append_new(comms, group_json(l, &g[k]));
    free(g[k].members);
  }
  free(g);
  return json_pack("{s:o, s:b}", "communicators", comms, "efa_seen", l->efa_seen);
}

int trun_nccl_log_print(trun_nccl_log *l, FILE *out) {
  json_t *j = trun_nccl_log_json(l);
  json_t *comms = json_object_get(j, "communicators");
  int bad = 0;
  fprintf(out, "==== trun: NCCL transport report: %zu communicator(s) ====\n", json_array_size(comms));
  if (json_array_size(comms) == 0)
    fprintf(out,
            "  no communicator lines found (NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,P2P,NET needed)\n");
  size_t i;
  json_t *c;
  json_array_foreach(comms, i, c) {
    fprintf(out, "  communicator %zu (%s): %d ranks, %d node(s), %d local rank(s); seen %d rank(s) on", i + 1,
            json_string_value(json_object_get(c, "id")),
            (int)json_integer_value(json_object_get(c, "nranks")),
            (int)json_integer_value(json_object_get(c, "nnodes")),
            (int)json_integer_value(json_object_get(c, "local_ranks")),
            (int)json_integer_value(json_object_get(c, "ranks_seen")));
    size_t k;
    json_t *e;
    json_array_foreach(json_object_get(c, "hosts"), k, e) fprintf(out, " %s", json_string_value(e));
    fprintf(out, "\n");
    const char *name;
    json_object_foreach(json_object_get(c, "transports"), name, e)
        fprintf(out, "    %-24s %d connection(s)\n", name, (int)json_integer_value(e));
    json_t *pairs = json_object_get(c, "pairs");
    json_array_foreach(pairs, k, e) {
      if (k == TRUN_NCCL_PRINT_PAIRS) {
        fprintf(out, "    ... %zu more peer pair(s): trun-topo --nccl-log FILE... --json lists them all\n",
                json_array_size(pairs) - k);
        break;
      }
      int n = (int)json_integer_value(json_object_get(e, "channels"));
      fprintf(out, "    rank %d -> rank %d: %s (%d channel%s)\n",
              (int)json_integer_value(json_object_get(e, "src")),
              (int)json_integer_value(json_object_get(e, "dst")),
              json_string_value(json_object_get(e, "transport")), n, n == 1 ? "" : "s");
    }
    int healthy = 0;
    json_array_foreach(json_object_get(c, "verdicts"), k, e) {
      const char *v = json_string_value(e);
      healthy |= strncmp(v, TRUN_NCCL_V_HEALTHY, strlen(TRUN_NCCL_V_HEALTHY)) == 0;
      fprintf(out, "    verdict: %s\n", v);
    }
    bad += !healthy;
  }
  fprintf(out, "==== end of NCCL transport report ====\n");
  json_decref(j);
  return bad;
}
