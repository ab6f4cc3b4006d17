/* The agents' key space (server.h): who may write it, how an agent proves it is one, and which keys a
 * connection may own. Called from the request path under kv_mu; calls server_acl.c only (layers:
 * server_int.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "server_int.h"

int trun_server_agent_token(trun_server *s, const char *token) {
  if (token == NULL || strlen(token) < TRUN_STORE_TOKEN_MIN || strlen(token) > TRUN_STORE_TOKEN_MAX)
    return -EINVAL;
  char *t = strdup(token);
  if (t == NULL) return -ENOMEM;
  pthread_mutex_lock(&s->kv_mu);
  free(s->token);
  s->token = t;
  pthread_mutex_unlock(&s->kv_mu);
  return 0;
}

int trun_server_protect(trun_server *s, const char *prefix, const char *after) {
  if (prefix == NULL || prefix[0] == '\0') return -EINVAL;
  char *p = strdup(prefix), *a = after ? strdup(after) : NULL;
  if (p == NULL || (after && a == NULL)) {
    free(p);
    free(a);
    return -ENOMEM;
  }
  pthread_mutex_lock(&s->kv_mu);
  prot_rule *n = realloc(s->prot, (s->nprot + 1) * sizeof(*n));
  if (n == NULL) {
    pthread_mutex_unlock(&s->kv_mu);
    free(p);
    free(a);
    return -ENOMEM;
  }
  s->prot = n;
  s->prot[s->nprot++] = (prot_rule){p, a};
  pthread_mutex_unlock(&s->kv_mu);
  return 0;
}

void trun__server_auth_free(trun_server *s) {
  for (size_t i = 0; i < s->nprot; i++) {
    free(s->prot[i].prefix);
    free(s->prot[i].after);
  }
  free(s->prot);
  free(s->token);
  free(s->addr_marker);
}

/* The length of the key-space root of rule r that key begins with, followed by '/'; 0 when it does not. */
static size_t rule_root(const prot_rule *r, trun_slice key) {
  size_t pl = strlen(r->prefix);
  if (key.n < pl || memcmp(key.p, r->prefix, pl) != 0) return 0;
  size_t at = pl;
  if (r->after) {
    size_t d = at;
    while (d < key.n && key.p[d] >= '0' && key.p[d] <= '9') d++;
    size_t al = strlen(r->after);
    if (d == at || key.n - d < al || memcmp(key.p + d, r->after, al) != 0) return 0;
    at = d + al;
  }
  return at < key.n && key.p[at] == '/' ? at : 0;
}

/* The root length of the first rule that protects key; 0: not the agents' key. */
static size_t agents_root(const trun_server *s, trun_slice key) {
  for (size_t i = 0; i < s->nprot; i++) {
    size_t n = rule_root(&s->prot[i], key);
    if (n) return n;
  }
  return 0;
}

static int all_digits(const uint8_t *p, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (p[i] < '0' || p[i] > '9') return 0;
  return 1;
}

/* Whether key is "<root>/<marker><digits>" or "<root>/<segment><marker><digits>" (marker starts with '/'). */
static int key_form(const trun_server *s, trun_slice key, const char *marker) {
  size_t root = agents_root(s, key);
  if (root == 0 || marker == NULL) return 0;
  const uint8_t *p = key.p + root;
  size_t n = key.n - root, ml = strlen(marker);
  if (n >= ml && memcmp(p, marker, ml) == 0) return all_digits(p + ml, n - ml);
  const uint8_t *slash = n > 1 ? memchr(p + 1, '/', n - 1) : NULL;
  if (slash == NULL || slash == p + 1) return 0;
  size_t off = (size_t)(slash - p);
  return n - off >= ml && memcmp(slash, marker, ml) == 0 && all_digits(slash + ml, n - off - ml);
}

int trun__key_owned(const conn *c, trun_slice key) {
  return c->srv->own_gone && c->agent && key_form(c->srv, key, c->srv->own_marker);
}

int trun__key_hidden(const conn *c, trun_slice key) {
  return !c->agent && c->srv->nprot > 0 && agents_root(c->srv, key) != 0;
}

int trun_server_address_keys(trun_server *s, const char *marker) {
  if (marker == NULL || marker[0] != '/') return -EINVAL;
  char *m = strdup(marker);
  if (m == NULL) return -ENOMEM;
  pthread_mutex_lock(&s->kv_mu);
  free(s->addr_marker);
  s->addr_marker = m;
  pthread_mutex_unlock(&s->kv_mu);
  return 0;
}

/* An address key's SET by c: 0 when val is c's own peer address as a bare numeric address, else -EACCES
 * with c->why set. */
static int address_fact(conn *c, trun_slice key, trun_slice val) {
  char text[INET6_ADDRSTRLEN + 8] = "";
  size_t n = val.n < sizeof(text) - 1 ? val.n : sizeof(text) - 1;
  memcpy(text, val.p, n);
  for (size_t i = 0; i < n; i++)
    if (text[i] < 0x20 || text[i] >= 0x7f) text[i] = '?';
  acl_entry e;
  memset(&e, 0, sizeof(e));
  int ok = val.n < sizeof(text) - 1 && memchr(val.p, '/', val.n) == NULL && memchr(val.p, 0, val.n) == NULL &&
           trun_server_parse_cidr(text, &e.family, e.a, &e.prefix) == 0 && e.family == c->addr.family &&
           memcmp(e.a, c->addr.a, e.family == AF_INET ? 4 : 16) == 0;
  if (ok) return 0;
  snprintf(c->why, sizeof(c->why),
           "a node's address key ('%.*s') must hold the bare address its connection comes from (%s), not "
           "'%s'",
           (int)(key.n < 40 ? key.n : 40), (const char *)key.p, c->peer, text);
  return -EACCES;
}

/* Constant-time comparison of the presented token with the server's. */
static int token_matches(const char *want, const uint8_t *got, size_t n) {
  size_t wl = strlen(want);
  unsigned diff = (unsigned)(wl ^ n);
  for (size_t i = 0; i < wl; i++) diff |= (unsigned)(uint8_t)want[i] ^ (i < n ? got[i] : 0u);
  return diff == 0;
}

/* The request's keys that it writes: 1 when any is the agents'. */
static int writes_agents_keys(const trun_server *s, const trun_req *r, trun_slice *which) {
  switch (r->op) {
    case TRUN_OP_SET:
    case TRUN_OP_APPEND:
    case TRUN_OP_COMPARE_SET:
    case TRUN_OP_ADD:
    case TRUN_OP_DELETE_KEY:
    case TRUN_OP_BARRIER:
    case TRUN_OP_QUEUE_PUSH:
    case TRUN_OP_QUEUE_POP: *which = r->key; return agents_root(s, r->key) != 0;
    case TRUN_OP_MULTI_SET: {
      const uint8_t *pos = r->items;
      for (uint64_t i = 0; i < r->count; i++) {
        trun_slice key = trun_req_item(&pos);
        (void)trun_req_item(&pos);
        if (agents_root(s, key)) {
          *which = key;
          return 1;
        }
      }
      return 0;
    }
    default: return 0;
  }
}

static const uint8_t token_key[] = TRUN_STORE_TOKEN_KEY;
#define TOKEN_KEY_LEN (sizeof(token_key) - 1)

int trun__server_auth_request(conn *c, const trun_req *r, const char **why) {
  trun_server *s = c->srv;
  if (r->op == TRUN_OP_CHECK && r->count == 1) {
    const uint8_t *pos = r->items;
    trun_slice key = trun_req_item(&pos);
    if (key.n < TOKEN_KEY_LEN || memcmp(key.p, token_key, TOKEN_KEY_LEN) != 0) return 0;
    if (s->token == NULL) return 0; /* no agents' key space here: an ordinary CHECK (NOT_READY) */
    if (!token_matches(s->token, key.p + TOKEN_KEY_LEN, key.n - TOKEN_KEY_LEN)) {
      STAT_ADD(s, refused, 1);
      snprintf(c->why, sizeof(c->why),
               "it presented an agent token that is not this job's: every trun agent of the job needs the "
               "same TRUN_RDZV_TOKEN (or --rdzv-conf trun_token), see docs/store.md");
      *why = c->why;
      return -EACCES;
    }
    c->agent = 1;
    __atomic_store_n(&c->probation, 0, __ATOMIC_RELAXED); /* an agent: no longer evictable */
    if (trun_buf_append_u8(&c->out, TRUN_CHECK_READY) < 0) {
      *why = "out of memory";
      return -ENOMEM;
    }
    return 1;
  }
  /* Beyond the per-peer limit (server_admit.c, admit_on_probation): nothing but the handshake's PING before
   * the token. */
  if (r->op != TRUN_OP_PING && __atomic_load_n(&c->probation, __ATOMIC_RELAXED)) {
    STAT_ADD(s, refused, 1);
    snprintf(c->why, sizeof(c->why),
             "too many connections from this address (the per-peer connection limit): one beyond it must "
             "present this job's agent token before any request but PING");
    *why = c->why;
    return -EACCES;
  }
  trun_slice which;
  if (c->agent && r->op == TRUN_OP_SET && key_form(s, r->key, s->addr_marker) &&
      address_fact(c, r->key, r->val) < 0) {
    STAT_ADD(s, refused, 1);
    *why = c->why;
    return -EACCES;
  }
  if (c->agent || s->nprot == 0 || !writes_agents_keys(s, r, &which)) return 0;
  STAT_ADD(s, refused, 1);
  char kt[80];
  size_t n = which.n < 48 ? which.n : 48;
  for (size_t i = 0; i < n; i++) kt[i] = which.p[i] >= 0x20 && which.p[i] < 0x7f ? (char)which.p[i] : '?';
  kt[n] = '\0';
  snprintf(c->why, sizeof(c->why),
           "a write to the agents' key space ('%s%s') without this job's agent token (workers and other "
           "clients write only their own keys; docs/store.md)",
           kt, which.n > n ? "..." : "");
  *why = c->why;
  return -EACCES;
}
