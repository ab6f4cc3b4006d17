/* The agent's TCPStore server, on its own libuv loop in its own thread, so that the agent's blocking
 * store client (rendezvous) and its supervision loop never stall the workers' store. */
#ifndef TRUN_STORE_HOST_H
#define TRUN_STORE_HOST_H

typedef struct trun_store_host trun_store_host;

/* Listens on host:port (NULL host: every address; port 0: a free port). Returns 0 or a negative libuv
 * error; *port_out gets the bound port. */
int trun_store_host_start(const char *host, int port, trun_store_host **out, int *port_out);
/* Stops the server, joins the thread and frees everything. */
void trun_store_host_stop(trun_store_host *h);

#endif
