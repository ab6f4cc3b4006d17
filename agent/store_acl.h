/* Who may reach the store an agent hosts for the job (README "Store access"):
 *  - a job whose every rank is local (standalone, one node): the store listens on 127.0.0.1 when the
 *    workers' MASTER_ADDR resolves there; otherwise on every address but admits only this host's own
 *    addresses;
 *  - --store-allow-peers (static rendezvous, several nodes): once every node joined a round, only
 *    loopback, this host's addresses and the addresses the joined agents connect from are admitted
 *    (each agent publishes it as /trun/<run_id>/r<round>/addr/<group rank>);
 *  - always: at most TRUN_STORE_MAX_CONNS_PER_PEER connections from one address and a request may hold at
 *    most TRUN_STORE_MAX_CONN_MEMORY bytes of input buffer. */
#ifndef TRUN_STORE_ACL_H
#define TRUN_STORE_ACL_H

#include <stddef.h>

#include "rdzv.h"
#include "store_host.h"

#define TRUN_STORE_MAX_CONNS_PER_PEER 4096
#define TRUN_STORE_MAX_CONN_MEMORY ((size_t)80 << 20)

/* Starts the store node rank 0 hosts. local_job: every rank runs on this host; workers_addr: the
 * workers' MASTER_ADDR. 0 or a negative libuv error. */
int trun_store_acl_start(int local_job, const char *workers_addr, int port, trun_store_host **out,
                         int *port_out);
/* Admits loopback and every address of this host's interfaces (getifaddrs). 0 or a negative errno. */
int trun_store_acl_allow_local(trun_server *s);
/* Every agent, before joining a static round: publishes the address its store connection comes from. */
int trun_store_acl_publish(trun_rdzv *r, int round);
/* The hosting agent with --store-allow-peers, after a round completed: admits the joined agents'
 * addresses (plus loopback and this host) and turns enforcement on. 0 or -1 with a reason. */
int trun_store_acl_apply(trun_rdzv *r, int round, char *err, size_t errlen);

#endif
