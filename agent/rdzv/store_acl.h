/* Who may reach the store an agent hosts for the job (docs/store.md):
 *  - a job whose every rank is local (standalone, one node): when the workers' MASTER_ADDR resolves only
 *    to loopback addresses (127.0.0.0/8, ::1: "localhost", or a host name that Debian's and Ubuntu's
 *    installers map to 127.0.1.1), the store listens on exactly those; otherwise on every address but
 *    admits only this host's own addresses;
 *  - --store-allow-peers (static rendezvous, several nodes): once every node joined a round, only
 *    loopback, this host's addresses and the addresses the joined agents connect from are admitted
 *    (each agent publishes it as /trun/<run_id>/r<round>/addr/<group rank>; the store takes that key only
 *    from an agent's connection and only holding the bare address it comes from); the list is replaced
 *    for each round;
 *  - --store-allow-peers with the c10d backend: after each round, the workers' store that group rank 0 hosts
 *    admits only loopback, this host and the addresses the round's participants' names (their rendezvous
 *    addr: --local-addr or FQDN) resolve to; the rendezvous store stays open to joins;
 *  - c10d with --nnodes 1 (max nodes 1): both stores start like the single-node static store above (the
 *    rendezvous store by the endpoint's host, the workers' store by MASTER_ADDR);
 *  - always: at most TRUN_STORE_MAX_CONNS_PER_PEER connections from one address, at most the agent's
 *    open-file limit less TRUN_STORE_FD_RESERVE in all (the agent keeps descriptors for pipes, logs and
 *    restarts however many peers connect), and a request may hold at most TRUN_STORE_MAX_CONN_MEMORY bytes
 *    of input buffer. */
#ifndef TRUN_STORE_ACL_H
#define TRUN_STORE_ACL_H

#include <netinet/in.h>
#include <stddef.h>

#include "store_host.h"

#define TRUN_STORE_MAX_CONNS_PER_PEER 4096
#define TRUN_STORE_MAX_CONN_MEMORY ((size_t)80 << 20)
#define TRUN_STORE_FD_RESERVE 256

/* The store's total connection limit in a process whose soft RLIMIT_NOFILE is nofile: nofile less
 * TRUN_STORE_FD_RESERVE, at least 64; 0 (none) when nofile is unlimited. */
int trun_store_conn_budget(unsigned long long nofile);

/* --store-threads auto: 4 loops with 32 or more usable CPUs, 2 with 8 or more, else 1. */
int trun_store_threads_auto(int cpus_usable);

/* The distinct numeric addresses host resolves to, into out[0..max), when every one is a loopback address
 * (127.0.0.0/8, ::1, IPv4-mapped 127/8); 0 when host does not resolve, resolves to any other address, or to
 * more than max addresses. */
int trun_store_loopback_addrs(const char *host, char out[][INET6_ADDRSTRLEN], int max);

/* Starts the store node rank 0 hosts. local_job: every rank runs on this host; workers_addr: the
 * workers' MASTER_ADDR; threads: its event loops (0: auto from this process's usable CPUs); configure
 * (NULL: none) sets the server up before it serves anyone. 0 or a negative libuv error or errno. */
int trun_store_acl_start(int local_job, const char *workers_addr, int port, int threads,
                         trun_store_host_configure_fn configure, void *arg, trun_store_host **out,
                         int *port_out);
/* Admits loopback and every address of this host's interfaces (getifaddrs). 0 or a negative errno. */
int trun_store_acl_allow_local(trun_server *s);
/* Replaces the allow-list with loopback, this host's addresses and every address each of names[0..n)
 * resolves to (rebuilt for each round). 0, or -1 with a reason in err (a name that does not resolve). */
int trun_store_acl_allow_names(trun_server *s, const char *const *names, size_t n, char *err, size_t errlen);
#endif
