/* A loopback port held for the workers (portheld.h). */
#include "portheld.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* A socket with SO_REUSEPORT (only) bound to 127.0.0.1:port (0: one the kernel picks, free of every other
 * socket); *step names the call that failed. */
static int bind_reuseport(unsigned port, const char **step) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((unsigned short)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (s < 0)
    *step = "socket";
  else if (setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
    *step = "setsockopt(SO_REUSEPORT)";
  else if (bind(s, (struct sockaddr *)&sin, sizeof(sin)) < 0)
    *step = port ? "bind(127.0.0.1:<the port again>)" : "bind(127.0.0.1:0)";
  else
    return s;
  int e = errno;
  if (s >= 0) close(s);
  errno = e;
  return -1;
}

int trun_port_hold(unsigned *port, const char **step) {
  *step = NULL;
  int first = bind_reuseport(0, step);
  if (first < 0) return -errno;
  struct sockaddr_in sin;
  socklen_t sl = sizeof(sin);
  if (getsockname(first, (struct sockaddr *)&sin, &sl) < 0) {
    int e = errno;
    close(first);
    *step = "getsockname";
    return -e;
  }
  /* The port bound again by its number, beside the first socket (so it is never free in between): a socket
   * bound to a port it named keeps it when it stops listening (relay.h), one bound to port 0 gives it up. */
  int s = bind_reuseport(ntohs(sin.sin_port), step);
  int e = errno;
  close(first);
  if (s < 0) return -e;
  *port = ntohs(sin.sin_port);
  return s;
}
