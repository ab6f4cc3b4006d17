/* TCPStore wire protocol: query codes of every torch generation, mapped onto one operation set.
 * Facts: shared/spec/tcpstore-protocol.md. All integers on the wire are little-endian (trun_put_u32 and
 * the others, base/buf.h). */
#ifndef TRUN_STORE_PROTO_H
#define TRUN_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>

/* Generation-independent operations. */
typedef enum {
  TRUN_OP_VALIDATE = 0,
  TRUN_OP_SET,
  TRUN_OP_COMPARE_SET,
  TRUN_OP_GET,
  TRUN_OP_ADD,
  TRUN_OP_CHECK,
  TRUN_OP_WAIT,
  TRUN_OP_GETNUMKEYS,
  TRUN_OP_DELETE_KEY,
  TRUN_OP_APPEND,
  TRUN_OP_MULTI_GET,
  TRUN_OP_MULTI_SET,
  TRUN_OP_CANCEL_WAIT,
  TRUN_OP_PING,
  TRUN_OP_QUEUE_PUSH,
  TRUN_OP_QUEUE_POP,
  TRUN_OP_QUEUE_LEN,
  TRUN_OP_LIST,
  TRUN_OP_BARRIER,
  TRUN_OP_WATCH_KEY, /* 1.13/2.0 only */
  TRUN_OP__COUNT
} trun_op;

/* Wire generations. A server learns a connection's generation from its first bytes. */
typedef enum {
  TRUN_GEN_UNKNOWN = 0,
  TRUN_GEN_V2,        /* torch >= 2.2: VALIDATE handshake, codes = trun_op values 0..18 */
  TRUN_GEN_LEGACY113, /* torch 1.13 / 2.0: SET=0 ... WATCH_KEY=7 DELETE_KEY=8 */
  TRUN_GEN_LEGACY21   /* torch 2.1: SET=0 ... DELETE_KEY=7 APPEND=8 ... CANCEL_WAIT=11 */
} trun_gen;

#define TRUN_VALIDATE_MAGIC 0x3C85F7CEu

/* Reply bytes. */
#define TRUN_CHECK_READY 0
#define TRUN_CHECK_NOT_READY 1
#define TRUN_WAIT_STOP_WAITING 0
#define TRUN_WAIT_CANCELED 1
#define TRUN_WATCH_KEY_UPDATED 0
#define TRUN_WATCH_KEY_CREATED 1
#define TRUN_WATCH_KEY_DELETED 2
#define TRUN_WATCH_REGISTERED 3

/* Wire code of an operation in a generation, or -1 when that generation lacks it. */
int trun_proto_code(trun_gen gen, trun_op op);
/* Operation of a wire code in a generation, or -1 when unknown there. */
int trun_proto_op(trun_gen gen, uint8_t code);
const char *trun_proto_op_name(trun_op op);
const char *trun_proto_gen_name(trun_gen gen);

#endif
