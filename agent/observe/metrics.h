/* A tiny Prometheus endpoint on the agent's libuv loop: GET /metrics answers the text exposition format
 * (version 0.0.4) that render() writes; anything else gets 404 (405 for another method). HTTP/1.0 and 1.1,
 * one request per connection (Connection: close). Never blocks: replies go out through libuv; a request
 * over 8 KiB gets 431, a client silent for 10 s is dropped, at most 64 connections at once. */
#ifndef TRUN_METRICS_H
#define TRUN_METRICS_H

#include <uv.h>

#include "base/base.h"

typedef struct trun_metrics trun_metrics;
typedef void (*trun_metrics_render)(void *arg, trun_buf *out);

#define TRUN_METRICS_MAX_REQUEST 8192
#define TRUN_METRICS_MAX_CONNS 64 /* open at once; a newcomer beyond it closes the longest-idle one */

/* Listens on host:port (NULL host: every address, port 0: a free one). 0 or a negative libuv error. */
int trun_metrics_start(uv_loop_t *loop, const char *host, int port, trun_metrics_render render, void *arg,
                       trun_metrics **out, int *port_out);
/* A health probe on the same server (TORCHELASTIC_HEALTH_CHECK_PORT): GET or HEAD of any path answers
 * probe's body (JSON) with 200 when probe returns 1, 503 when 0; other methods get 405. When
 * TRUN_METRICS_MAX_CONNS connections are open, a new one closes the oldest unanswered one (a crowd of idle
 * clients cannot lock a probe out). */
typedef int (*trun_metrics_probe)(void *arg, trun_buf *out);
int trun_metrics_start_probe(uv_loop_t *loop, const char *host, int port, trun_metrics_probe probe, void *arg,
                             trun_metrics **out, int *port_out);
/* The request bytes the reader has examined so far, over all connections: its work, linear in the bytes
 * received however they are split (a client trickling a head byte by byte costs no more per byte). */
unsigned long long trun_metrics_scanned(const trun_metrics *m);
/* Closes the listener and every connection; memory goes once the loop has run the close callbacks. */
void trun_metrics_close(trun_metrics *m);
/* Appends "name{labels} value\n" (labels may be NULL or ""). */
void trun_metrics_sample(trun_buf *out, const char *name, const char *labels, double value);
/* Appends "# HELP name help\n# TYPE name type\n". */
void trun_metrics_header(trun_buf *out, const char *name, const char *type, const char *help);

#endif
