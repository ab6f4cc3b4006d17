/* This host's name as torch's agents publish it (agent/discover/discover.h: trun_fqdn). */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "discover.h"

void trun_fqdn(char *out, size_t len) {
  char host[256];
  if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = '\0';
  snprintf(out, len, "%s", host);
  /* Python's socket.getfqdn(): reverse-resolve the host name's address, then take the first of the
   * reverse name and its aliases that holds a dot, else the reverse name. */
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL) return;
  struct hostent *he = NULL;
  if (res->ai_family == AF_INET)
    he = gethostbyaddr(&((struct sockaddr_in *)res->ai_addr)->sin_addr, sizeof(struct in_addr), AF_INET);
  else if (res->ai_family == AF_INET6)
    he = gethostbyaddr(&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr, sizeof(struct in6_addr), AF_INET6);
  freeaddrinfo(res);
  if (he == NULL || he->h_name == NULL) return;
  const char *pick = he->h_name;
  if (!strchr(pick, '.'))
    for (char **al = he->h_aliases; al && *al; al++)
      if (strchr(*al, '.')) {
        pick = *al;
        break;
      }
  snprintf(out, len, "%s", pick);
}
