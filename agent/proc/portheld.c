/* A loopback port held for the workers (portheld.h). */
#include "portheld.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

int trun_port_hold(unsigned *port, const char **step) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof(sin);
  *step = NULL;
  if (s < 0)
    *step = "socket";
  else if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
    *step = "setsockopt(SO_REUSEADDR)";
  else if (setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
    *step = "setsockopt(SO_REUSEPORT)";
  else if (bind(s, (struct sockaddr *)&sin, sizeof(sin)) < 0)
    *step = "bind(127.0.0.1:0)";
  else if (getsockname(s, (struct sockaddr *)&sin, &sl) < 0)
    *step = "getsockname";
  if (*step) {
    int e = errno;
    if (s >= 0) close(s);
    return -e;
  }
  *port = ntohs(sin.sin_port);
  return s;
}
