/* The instance's identity: EC2 instance metadata (IMDSv2 through libcurl), then DMI product_name.
 *
 * IMDS (shared/spec/gpu-efa-nccl.md §6): PUT {endpoint}/latest/api/token with
 * X-aws-ec2-metadata-token-ttl-seconds: 21600, then GET latest/meta-data/{instance-type, instance-id,
 * placement/availability-zone, placement/group-name} with X-aws-ec2-metadata-token. Endpoint:
 * TRUN_IMDS_ENDPOINT, else AWS_EC2_METADATA_SERVICE_ENDPOINT (the SDKs' name), else
 * http://169.254.169.254. AWS_EC2_METADATA_DISABLED=true skips the network like no_imds.
 *
 * Time: everything together has a 1 s deadline (the token PUT at most 600 ms of it, connects 250 ms), so a
 * host without IMDS, or a pod whose token reply is dropped by hop limit 1, loses at most ~1 s.
 *
 * Falling back to IMDSv1 (tokenless GETs), as the AWS SDKs do (S1): when the PUT is answered 401, 403, 404
 * or 405 (tokens refused or not implemented: an old IMDS or a proxy), and when the PUT connected but got no
 * answer (the hop-limit-1 signature: only PUT replies carry the reduced TTL, so GETs can still arrive if the
 * instance allows IMDSv1). A GET then answered 401 means IMDSv2 is required: we stop. 400 on the PUT is
 * terminal (the SDK's rule), as is a refused or timed-out connect (nothing is there). No retries: the
 * token is fresh, so a 401 on a GET cannot mean "expired".
 *
 * Replies are checked: at most 4 KiB are read, and a value must look like what it names (an instance type
 * "family.size" in [a-z0-9-], an id "i-" + hex, a zone in [a-z0-9-], a group name printable ASCII); an
 * instance type that fails the check discards the whole IMDS answer, another field that fails is left "".
 *
 * DMI: on EC2 Nitro, TRUN_DMI_ROOT (default /sys/class/dmi/id)/product_name is the instance type (what
 * aws-ofi-nccl reads, O1) and sys_vendor is "Amazon EC2"; source "dmi" only when it looks like one.
 *
 * libcurl is loaded on first use (curl_dl.h): an agent that never asks IMDS never maps it.
 * libcurl's global state: curl_global_init is not thread-safe before 7.84.0. When libcurl says it is
 * (CURL_VERSION_THREADSAFE), every call does its own reference-counted curl_global_init /
 * curl_global_cleanup pair and we keep nothing; otherwise the init runs once under pthread_once (the
 * once-flag is then the only global of ours) and is never cleaned up. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/base.h"
#include "curl_dl.h"
#include "discover.h"
#include "discover_internal.h"

/* Internal, exposed for tests/unit/test_instance.c (which declares them itself). */

#define IMDS_DEFAULT_ENDPOINT "http://169.254.169.254"
#define IMDS_BUDGET_MS 1000L
#define IMDS_TOKEN_MAX_MS 600L
#define IMDS_CONNECT_MS 250L
#define IMDS_MIN_LEFT_MS 20L
#define IMDS_BODY_MAX 4096

typedef struct {
  char buf[IMDS_BODY_MAX + 1];
  size_t len;
  int overflow;
} imds_body;

typedef struct {
  const trun_curl *cu;
  CURL *h;
  char base[512];
  long deadline_ms;
  char token_hdr[1100]; /* "X-aws-ec2-metadata-token: ...", "" for IMDSv1 */
} imds_client;

/* ---- value checks ----------------------------------------------------------------------------- */

/* 1 when s is an EC2 instance type: family "." size, lower-case letters, digits and '-', the family
 * starting with a letter and holding a digit (p4d.24xlarge, p6-b200.48xlarge, u-6tb1.metal). */
int trun_instance_type_plausible(const char *s) {
  if (s == NULL) return 0;
  size_t n = strlen(s);
  const char *dot = strchr(s, '.');
  if (n == 0 || n >= 64 || dot == NULL || dot == s || dot[1] == '\0' || strchr(dot + 1, '.')) return 0;
  if (!(s[0] >= 'a' && s[0] <= 'z')) return 0;
  int digit = 0;
  for (const char *p = s; *p; p++) {
    if (p == dot) continue;
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) return 0;
    if (p < dot && *p >= '0' && *p <= '9') digit = 1;
  }
  return digit && dot[-1] != '-' && dot[1] != '-' && s[n - 1] != '-';
}

static int id_ok(const char *s) {
  if (strncmp(s, "i-", 2) != 0 || s[2] == '\0' || strlen(s) >= 64) return 0;
  for (const char *p = s + 2; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
  return 1;
}

static int zone_ok(const char *s) {
  if (s[0] == '\0' || strlen(s) >= 64) return 0;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) return 0;
  return 1;
}

static int group_ok(const char *s) {
  if (s[0] == '\0' || strlen(s) >= 128) return 0;
  for (const char *p = s; *p; p++)
    if (*p < 0x20 || *p > 0x7e) return 0;
  return 1;
}

/* The body as a C string, one trailing newline dropped; NULL when it holds a NUL byte. */
static const char *body_text(imds_body *b) {
  if (b->overflow || memchr(b->buf, '\0', b->len)) return NULL;
  size_t n = b->len;
  if (n > 0 && b->buf[n - 1] == '\n') n--;
  if (n > 0 && b->buf[n - 1] == '\r') n--;
  b->buf[n] = '\0';
  return b->buf;
}

/* ---- HTTP ------------------------------------------------------------------------------------- */

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
  imds_body *b = ud;
  size_t n = size * nmemb;
  if (n > IMDS_BODY_MAX - b->len) {
    b->overflow = 1;
    return 0; /* aborts the transfer (CURLE_WRITE_ERROR) */
  }
  memcpy(b->buf + b->len, p, n);
  b->len += n;
  return n;
}

/* One request, bounded by min(cap_ms, time left). 0 with *status set, or -ETIMEDOUT (*connected says
 * whether the TCP connection was made), -ECONNREFUSED, -EMSGSIZE (reply over 4 KiB), -EIO. */
static int imds_request(imds_client *c, int put, const char *path, long cap_ms, long *status, imds_body *b,
                        int *connected) {
  *status = 0;
  *connected = 0;
  memset(b, 0, sizeof(*b));
  long left = c->deadline_ms - (long)(trun_mono_us() / 1000);
  if (left < IMDS_MIN_LEFT_MS) return -ETIMEDOUT;
  long timeout = left < cap_ms ? left : cap_ms;
  char url[700];
  snprintf(url, sizeof(url), "%s/latest/%s", c->base, path);
  struct curl_slist *hdrs = NULL;
  if (put)
    hdrs = c->cu->slist_append(hdrs, "X-aws-ec2-metadata-token-ttl-seconds: 21600");
  else if (c->token_hdr[0])
    hdrs = c->cu->slist_append(hdrs, c->token_hdr);
  if ((put || c->token_hdr[0]) && hdrs == NULL) return -ENOMEM;
  CURL *h = c->h;
  c->cu->easy_setopt(h, CURLOPT_URL, url);
  if (put) {
    c->cu->easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
  } else {
    c->cu->easy_setopt(h, CURLOPT_CUSTOMREQUEST, (char *)NULL);
    c->cu->easy_setopt(h, CURLOPT_HTTPGET, 1L);
  }
  c->cu->easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  c->cu->easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
  c->cu->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout < IMDS_CONNECT_MS ? timeout : IMDS_CONNECT_MS);
  c->cu->easy_setopt(h, CURLOPT_WRITEDATA, b);
  CURLcode rc = c->cu->easy_perform(h);
  c->cu->easy_setopt(h, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
  c->cu->slist_free_all(hdrs);
  if (rc == CURLE_OK) {
    c->cu->easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    *connected = 1;
    return 0;
  }
  long nconn = 0;
  curl_off_t tconn = 0;
  c->cu->easy_getinfo(h, CURLINFO_NUM_CONNECTS, &nconn);
  c->cu->easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &tconn);
  *connected = nconn > 0 || tconn > 0;
  if (rc == CURLE_WRITE_ERROR && b->overflow) return -EMSGSIZE;
  if (rc == CURLE_OPERATION_TIMEDOUT) return -ETIMEDOUT;
  if (rc == CURLE_COULDNT_CONNECT) return -ECONNREFUSED;
  trun_debug("instance identity: IMDS %s %s failed: %s", put ? "PUT" : "GET", url, c->cu->easy_strerror(rc));
  return -EIO;
}

static const char *why(int rc) {
  switch (rc) {
    case -ETIMEDOUT: return "no answer in time";
    case -ECONNREFUSED: return "connection refused";
    case -EMSGSIZE: return "reply over 4 KiB";
    default: return "transfer failed";
  }
}

/* GET latest/meta-data/<what> into out when ok(value); 1 stored, 0 not (out left ""), -1 when the server
 * says IMDSv2 is required (401 without a token). */
static int imds_get(imds_client *c, const char *what, int (*ok)(const char *), char *out, size_t outlen) {
  char path[128];
  snprintf(path, sizeof(path), "meta-data/%s", what);
  imds_body b;
  long status;
  int connected;
  int rc = imds_request(c, 0, path, IMDS_BUDGET_MS, &status, &b, &connected);
  if (rc == -EMSGSIZE) {
    trun_warn(
        "instance identity: IMDS GET %s/latest/%s sent over 4 KiB; ignoring it (is TRUN_IMDS_ENDPOINT / "
        "AWS_EC2_METADATA_SERVICE_ENDPOINT an EC2 metadata service?)",
        c->base, path);
    return 0;
  }
  if (rc < 0) {
    trun_debug("instance identity: IMDS GET %s/latest/%s: %s", c->base, path, why(rc));
    return 0;
  }
  if (status == 401 && c->token_hdr[0] == '\0') return -1;
  if (status != 200) {
    if (!(status == 404 && strcmp(what, "placement/group-name") == 0))
      trun_debug("instance identity: IMDS GET %s/latest/%s answered HTTP %ld", c->base, path, status);
    return 0;
  }
  const char *v = body_text(&b);
  if (v == NULL || !ok(v) || strlen(v) >= outlen) {
    trun_warn(
        "instance identity: IMDS GET %s/latest/%s gave a malformed value (%zu bytes%s); ignoring it "
        "(is TRUN_IMDS_ENDPOINT / AWS_EC2_METADATA_SERVICE_ENDPOINT an EC2 metadata service?)",
        c->base, path, b.len, b.overflow ? ", cut at 4 KiB" : "");
    return 0;
  }
  snprintf(out, outlen, "%s", v);
  return 1;
}

/* Token PUT then the GETs; 0 when a valid instance type was read (fields filled), else -1. */
static int imds_fetch(imds_client *c, trun_instance *in) {
  imds_body b;
  long status;
  int connected;
  int rc = imds_request(c, 1, "api/token", IMDS_TOKEN_MAX_MS, &status, &b, &connected);
  const char *tok = rc == 0 && status == 200 ? body_text(&b) : NULL;
  if (tok != NULL) {
    int good = tok[0] != '\0' && strlen(tok) <= 1024;
    for (const char *p = tok; good && *p; p++) good = *p > 0x20 && *p < 0x7f;
    if (!good) {
      trun_warn(
          "instance identity: IMDS token from PUT %s/latest/api/token is malformed (%zu bytes); "
          "not using IMDS (check TRUN_IMDS_ENDPOINT)",
          c->base, b.len);
      return -1;
    }
    snprintf(c->token_hdr, sizeof(c->token_hdr), "X-aws-ec2-metadata-token: %s", tok);
  } else if (rc == 0 && (status == 401 || status == 403 || status == 404 || status == 405)) {
    trun_debug("instance identity: IMDS token PUT %s/latest/api/token answered HTTP %ld; trying IMDSv1",
               c->base, status);
  } else if (rc == -ETIMEDOUT && connected) {
    trun_debug(
        "instance identity: IMDS token PUT %s/latest/api/token connected but got no answer (a pod "
        "behind PUT hop limit 1?); trying IMDSv1 in the time left",
        c->base);
  } else {
    if (rc == 0)
      trun_debug("instance identity: IMDS token PUT %s/latest/api/token answered HTTP %ld; not using IMDS",
                 c->base, status);
    else
      trun_debug("instance identity: IMDS token PUT %s/latest/api/token: %s; not using IMDS", c->base,
                 why(rc));
    return -1;
  }
  char type[sizeof(in->instance_type)] = "";
  int got = imds_get(c, "instance-type", trun_instance_type_plausible, type, sizeof(type));
  if (got < 0) {
    if (rc == -ETIMEDOUT)
      trun_info(
          "instance identity: IMDS at %s requires IMDSv2 but the token PUT got no answer (a pod behind "
          "PUT hop limit 1: set the instance's HttpPutResponseHopLimit to 2, run with hostNetwork, or use "
          "--no-imds); using DMI",
          c->base);
    else
      trun_info(
          "instance identity: IMDS at %s requires IMDSv2 but refused the token PUT (HTTP %ld); using DMI "
          "(use --no-imds to skip IMDS)",
          c->base, status);
  }
  if (got <= 0) return -1;
  snprintf(in->instance_type, sizeof(in->instance_type), "%s", type);
  imds_get(c, "instance-id", id_ok, in->instance_id, sizeof(in->instance_id));
  imds_get(c, "placement/availability-zone", zone_ok, in->availability_zone, sizeof(in->availability_zone));
  imds_get(c, "placement/group-name", group_ok, in->placement_group, sizeof(in->placement_group));
  return 0;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) {
  trun_curl cu;
  char err[256];
  if (trun_curl_load(&cu, err, sizeof(err)) == 0) cu.global_init(CURL_GLOBAL_DEFAULT);
}

static int curl_threadsafe(const trun_curl *cu) {
#ifdef CURL_VERSION_THREADSAFE
  const curl_version_info_data *vi = cu->version_info(CURLVERSION_NOW);
  return vi != NULL && (vi->features & CURL_VERSION_THREADSAFE) != 0;
#else
  (void)cu;
  return 0;
#endif
}

static int imds_discover(trun_instance *in, const char *endpoint) {
  trun_curl cu;
  char err[512];
  if (trun_curl_load(&cu, err, sizeof(err)) < 0) {
    trun_warn("instance identity: %s; skipping IMDS, using DMI (or pass --no-imds)", err);
    return -1;
  }
  int paired = curl_threadsafe(&cu);
  if (paired) {
    if (cu.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      trun_warn("instance identity: libcurl global init failed; skipping IMDS, using DMI");
      return -1;
    }
  } else {
    pthread_once(&curl_once, curl_init_once);
  }
  imds_client c = {.cu = &cu, .deadline_ms = (long)(trun_mono_us() / 1000) + IMDS_BUDGET_MS};
  snprintf(c.base, sizeof(c.base), "%s", endpoint);
  size_t n = strlen(c.base);
  while (n > 0 && c.base[n - 1] == '/') c.base[--n] = '\0';
  int rc = -1;
  c.h = cu.easy_init();
  if (c.h == NULL) {
    trun_warn("instance identity: curl_easy_init failed (out of memory?); skipping IMDS, using DMI");
  } else {
    cu.easy_setopt(c.h, CURLOPT_NOSIGNAL, 1L);
    cu.easy_setopt(c.h, CURLOPT_NOPROXY, "*"); /* never send metadata requests through a proxy */
    cu.easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 0L);
    cu.easy_setopt(c.h, CURLOPT_USERAGENT, "trun");
    cu.easy_setopt(c.h, CURLOPT_WRITEFUNCTION, on_body);
#if LIBCURL_VERSION_NUM >= 0x075500
    cu.easy_setopt(c.h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    cu.easy_setopt(c.h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    rc = imds_fetch(&c, in);
    cu.easy_cleanup(c.h);
  }
  if (paired) cu.global_cleanup();
  if (rc < 0) {
    in->instance_type[0] = in->instance_id[0] = in->availability_zone[0] = in->placement_group[0] = '\0';
  }
  return rc;
}

/* ---- DMI -------------------------------------------------------------------------------------- */

/* Copies the trimmed first line of s into out. */
static void first_line(const char *s, char *out, size_t outlen) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strcspn(s, "\r\n");
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
  if (n >= outlen) n = outlen - 1;
  memcpy(out, s, n);
  out[n] = '\0';
}

/* 1 and the instance type in out when product_name (a DMI file's text) names one and sys_vendor (NULL
 * when unreadable) is Amazon's; else 0. */
int trun_dmi_instance_type(const char *product_name, const char *sys_vendor, char *out, size_t outlen) {
  if (product_name == NULL || out == NULL || outlen == 0) return 0;
  char name[128], vendor[128];
  first_line(product_name, name, sizeof(name));
  if (sys_vendor != NULL) {
    first_line(sys_vendor, vendor, sizeof(vendor));
    if (strncmp(vendor, "Amazon", 6) != 0) return 0;
  }
  if (!trun_instance_type_plausible(name) || strlen(name) >= outlen) return 0;
  snprintf(out, outlen, "%s", name);
  return 1;
}

static int dmi_discover(trun_instance *in) {
  const char *root = getenv("TRUN_DMI_ROOT");
  if (root == NULL || root[0] == '\0') root = "/sys/class/dmi/id";
  char path[4200], product[256], vendor[256];
  snprintf(path, sizeof(path), "%s/product_name", root);
  if (trun_read_small(path, product, sizeof(product)) < 0) return -1;
  snprintf(path, sizeof(path), "%s/sys_vendor", root);
  int have_vendor = trun_read_small(path, vendor, sizeof(vendor)) >= 0;
  return trun_dmi_instance_type(product, have_vendor ? vendor : NULL, in->instance_type,
                                sizeof(in->instance_type))
             ? 0
             : -1;
}

/* ---- entry point ------------------------------------------------------------------------------ */

int trun_discover_instance(trun_node *node, int no_imds) {
  if (node == NULL) return -EINVAL;
  trun_instance *in = &node->instance;
  memset(in, 0, sizeof(*in));
  in->source = "none";
  const char *off = getenv("AWS_EC2_METADATA_DISABLED");
  if (off != NULL && strcasecmp(off, "true") == 0) no_imds = 1;
  if (!no_imds) {
    const char *ep = getenv("TRUN_IMDS_ENDPOINT");
    if (ep == NULL || ep[0] == '\0') ep = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (ep == NULL || ep[0] == '\0') ep = IMDS_DEFAULT_ENDPOINT;
    if (imds_discover(in, ep) == 0) {
      in->source = "imds";
      return 0;
    }
  }
  if (dmi_discover(in) == 0) in->source = "dmi";
  return 0;
}
