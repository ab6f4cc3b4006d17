/* The words for a failed connect (store/client.h: trun_client_connect_cause), for a caller that waits on a
 * store and says why it cannot reach it (the rendezvous's waits, --rdzv-status). */
#include <errno.h>
#include <stdio.h>

#include "client.h"

void trun_client_connect_cause(int stage, int err, const char *said, const char *host, char *out,
                               size_t len) {
  if (stage == TRUN_CONNECT_RESOLVE) {
    snprintf(
        out, len,
        "the name '%s' does not resolve (%s); in Kubernetes a headless Service publishes a pod's name only "
        "once the pod is ready",
        host, said);
    return;
  }
  if (stage == TRUN_CONNECT_HANDSHAKE && err == ECONNRESET) {
    snprintf(
        out, len,
        "the store closed the connection at once: refused by its allow-list (--store-allow-peers), or it "
        "is not a torch >= 2.2 store (%s)",
        said);
    return;
  }
  if (stage == TRUN_CONNECT_HANDSHAKE && (err == EPROTO || err == ETIMEDOUT)) {
    snprintf(out, len,
             "something answers on that port but it is not a TCPStore (no answer to torch's VALIDATE/PING "
             "handshake): another program holds the port; choose another --master-port or --rdzv-endpoint "
             "port (%s)",
             said);
    return;
  }
  switch (err) {
    case ECONNREFUSED:
      snprintf(out, len, "connection refused: nothing listens on that port yet (%s)", said);
      break;
    case EHOSTUNREACH:
    case ENETUNREACH: snprintf(out, len, "no route to the host (%s)", said); break;
    case ETIMEDOUT: snprintf(out, len, "the connection timed out (%s)", said); break;
    default: snprintf(out, len, "%s", said); break;
  }
}
