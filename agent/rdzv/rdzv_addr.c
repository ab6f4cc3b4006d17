/* The addresses the nodes give each other (agent/rdzv/rdzv.h): --local-addr auto, this node's identity
 * taken from its connection to the rendezvous store instead of DNS; and the check, before the workers
 * start, that the MASTER_ADDR they are about to get leads somewhere from this node. Without it a name that
 * only resolves on the node that published it (a container's or a pod's host name without a headless
 * Service) leaves the workers retrying for torch's 30-minute time-out. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdzv_int.h"

int trun__rdzv_sa_text(const struct sockaddr *sa, char *text, size_t len) {
  if (sa->sa_family == AF_INET)
    return inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, text, len) ? 0 : -1;
  if (sa->sa_family == AF_INET6)
    return inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, text, len) ? 0 : -1;
  return -1;
}

int trun__rdzv_sa_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family != AF_INET6) return 0;
  const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* ---- --local-addr auto ---------------------------------------------------------------------------- */

/* The source address the kernel picks for the route to one of host's addresses (a UDP socket connected
 * there: connect() sends nothing), the first that is not a loopback one. 0, or -1. */
static int route_source(const char *host, char *text, size_t len) {
  struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
  if (getaddrinfo(host, "9", &hints, &res) != 0) return -1;
  int found = -1;
  for (struct addrinfo *ai = res; ai && found < 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    struct sockaddr_storage ss;
    socklen_t n = sizeof(ss);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 && getsockname(fd, (struct sockaddr *)&ss, &n) == 0 &&
        !trun__rdzv_sa_loopback((struct sockaddr *)&ss) &&
        trun__rdzv_sa_text((struct sockaddr *)&ss, text, len) == 0)
      found = 0;
    close(fd);
  }
  freeaddrinfo(res);
  return found;
}

/* The first address of an interface that is up and not loopback, IPv4 before IPv6 (link-local ones
 * skipped). 0, or -1. */
static int first_interface_addr(char *text, size_t len) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) < 0) return -1;
  int found = -1;
  for (int family = AF_INET; found < 0 && family != -1; family = family == AF_INET ? AF_INET6 : -1)
    for (struct ifaddrs *i = ifs; i && found < 0; i = i->ifa_next) {
      if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family || !(i->ifa_flags & IFF_UP) ||
          (i->ifa_flags & IFF_LOOPBACK) || trun__rdzv_sa_loopback(i->ifa_addr))
        continue;
      if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
        continue;
      if (trun__rdzv_sa_text(i->ifa_addr, text, len) == 0) found = 0;
    }
  freeifaddrs(ifs);
  return found;
}

/* An IPv4-mapped IPv6 address (a dual-stack socket's view of an IPv4 peer) as the IPv4 address it is. */
static void unmap_v4(struct sockaddr_storage *ss) {
  const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;
  if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) return;
  struct sockaddr_in a4 = {.sin_family = AF_INET};
  memcpy(&a4.sin_addr, &a6->sin6_addr.s6_addr[12], 4);
  memcpy(ss, &a4, sizeof(a4));
}

void trun__rdzv_auto_addr(trun_rdzv *r) {
  char text[INET6_ADDRSTRLEN] = "";
  const char *how = "the local address of its connection to the rendezvous store";
  struct sockaddr_storage ss;
  socklen_t n = sizeof(ss);
  int fd = r->client ? trun_client_fd(r->client) : -1;
  int ok = fd >= 0 && getsockname(fd, (struct sockaddr *)&ss, &n) == 0;
  if (ok) unmap_v4(&ss);
  if (!ok || trun__rdzv_sa_loopback((struct sockaddr *)&ss) ||
      trun__rdzv_sa_text((struct sockaddr *)&ss, text, sizeof(text)) < 0) {
    /* This node serves the rendezvous store and reaches it over loopback: the address the others reach
     * it by is its source on the route to the endpoint (its own address when the endpoint names it). */
    text[0] = '\0';
    how = "its source address on the route to the rendezvous endpoint";
    if (route_source(r->cfg->endpoint_host, text, sizeof(text)) < 0) {
      how = "the first address of an interface that is up (the endpoint leads to loopback here)";
      if (first_interface_addr(text, sizeof(text)) < 0) text[0] = '\0';
    }
  }
  if (text[0] == '\0') {
    trun_warn("--local-addr auto: this node has no address but loopback; it goes by its host name %s",
              r->host_addr);
    return;
  }
  snprintf(r->host_addr, sizeof(r->host_addr), "%s", text);
  trun_info("--local-addr auto: this node is %s (%s)", r->host_addr, how);
}

/* ---- the workers' MASTER_ADDR ----------------------------------------------------------------------- */

/* Where MASTER_ADDR comes from and how to give the nodes addresses that work: for err. */
static const char *master_fix(const trun_rdzv *r) {
  if (strcmp(r->info.master_addr, r->cfg->endpoint_host) == 0)
    return "it is the rendezvous endpoint's host (--master-addr / --rdzv-endpoint): give one every node "
           "resolves, an address or a DNS name (Kubernetes: a headless Service and the pods' subdomain)";
  return "it is the address node rank 0 published: its --local-addr, else its host name. Run every node with "
         "--local-addr auto (PET_LOCAL_ADDR=auto: its address on the route to the rendezvous endpoint), or "
         "give the nodes names the others resolve (Kubernetes: a headless Service and the pods' subdomain)";
}

/* 1 when something listens at port on ai's loopback address (connect() answers at once there). */
static int loopback_listens(const struct addrinfo *ai, int port) {
  struct sockaddr_storage ss;
  memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
  if (ss.ss_family == AF_INET)
    ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1; /* cannot tell: let the workers try */
  int ok = connect(fd, (struct sockaddr *)&ss, ai->ai_addrlen) == 0 || errno != ECONNREFUSED;
  close(fd);
  return ok;
}

int trun_rdzv_check_master(trun_rdzv *r, char *err, size_t errlen) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc;
  /* A resolver that cannot answer now (EAI_AGAIN: no DNS server reached) gets a few more seconds. */
  for (int tries = 0; (rc = getaddrinfo(r->info.master_addr, NULL, &hints, &res)) == EAI_AGAIN && tries < 5;
       tries++) {
    if (r->poll && r->poll(r->poll_arg)) break;
    sleep(1);
  }
  if (rc != 0) {
    snprintf(
        err, errlen,
        "the workers' MASTER_ADDR '%s' does not resolve on this node (%s, node rank %d: %s), so its workers "
        "would retry it until torch's 30-minute time-out; %s",
        r->info.master_addr, r->host_addr, r->info.group_rank,
        rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc), master_fix(r));
    return -1;
  }
  /* Only loopback addresses: right for the node whose agent (or worker, torch 1.13's c10d) serves the
   * workers' store and for nodes on that same host; elsewhere the workers would wait for themselves. */
  const struct addrinfo *lo = NULL;
  for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    if (!trun__rdzv_sa_loopback(ai->ai_addr)) {
      lo = NULL;
      break;
    }
    if (lo == NULL) lo = ai;
  }
  rc = 0;
  if (lo && r->info.group_world_size > 1 && !r->info.workers_host_store && r->info.master_port > 0 &&
      !loopback_listens(lo, r->info.master_port)) {
    char text[INET6_ADDRSTRLEN] = "?";
    trun__rdzv_sa_text(lo->ai_addr, text, sizeof(text));
    snprintf(
        err, errlen,
        "the workers' MASTER_ADDR '%s' resolves to the loopback address %s on this node (%s, node rank %d), "
        "where nothing serves the workers' store (port %d): its workers would wait for themselves; %s",
        r->info.master_addr, text, r->host_addr, r->info.group_rank, r->info.master_port, master_fix(r));
    rc = -1;
  }
  freeaddrinfo(res);
  return rc;
}

void trun__rdzv_static_master_addr(const trun_config *cfg, const char *host_addr, char *out, size_t len) {
  if (!cfg->standalone && cfg->endpoint_port != 0) {
    snprintf(out, len, "%s", cfg->endpoint_host);
    return;
  }
  /* All workers are local: publish this host's name like torchrun, unless it does not resolve here
   * (containers without an /etc/hosts entry), where torchrun's workers would retry forever. */
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int ok = getaddrinfo(host_addr, NULL, &hints, &res) == 0;
  if (res) freeaddrinfo(res);
  snprintf(out, len, "%s", ok ? host_addr : "127.0.0.1");
  if (!ok) trun_debug("host name %s does not resolve: workers get MASTER_ADDR=127.0.0.1", host_addr);
}
