#include "proto.h"

static const char *const op_names[TRUN_OP__COUNT] = {
    "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",       "WAIT",
    "GETNUMKEYS", "DELETE_KEY", "APPEND",      "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",
    "QUEUE_PUSH", "QUEUE_POP",  "QUEUE_LEN",   "LIST",      "BARRIER",   "WATCH_KEY"};

/* torch 1.13 / 2.0 numbering. */
static const int legacy113_ops[] = {TRUN_OP_SET,        TRUN_OP_COMPARE_SET, TRUN_OP_GET,
                                    TRUN_OP_ADD,        TRUN_OP_CHECK,       TRUN_OP_WAIT,
                                    TRUN_OP_GETNUMKEYS, TRUN_OP_WATCH_KEY,   TRUN_OP_DELETE_KEY};
/* torch 2.1 numbering. */
static const int legacy21_ops[] = {TRUN_OP_SET,        TRUN_OP_COMPARE_SET, TRUN_OP_GET,
                                   TRUN_OP_ADD,        TRUN_OP_CHECK,       TRUN_OP_WAIT,
                                   TRUN_OP_GETNUMKEYS, TRUN_OP_DELETE_KEY,  TRUN_OP_APPEND,
                                   TRUN_OP_MULTI_GET,  TRUN_OP_MULTI_SET,   TRUN_OP_CANCEL_WAIT};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

int trun_proto_op(trun_gen gen, uint8_t code) {
  switch (gen) {
    case TRUN_GEN_V2: return code <= TRUN_OP_BARRIER ? (int)code : -1;
    case TRUN_GEN_LEGACY113: return code < COUNT(legacy113_ops) ? legacy113_ops[code] : -1;
    case TRUN_GEN_LEGACY21: return code < COUNT(legacy21_ops) ? legacy21_ops[code] : -1;
    default: return -1;
  }
}

int trun_proto_code(trun_gen gen, trun_op op) {
  switch (gen) {
    case TRUN_GEN_V2: return op <= TRUN_OP_BARRIER ? (int)op : -1;
    case TRUN_GEN_LEGACY113:
      for (int i = 0; i < COUNT(legacy113_ops); i++)
        if (legacy113_ops[i] == (int)op) return i;
      return -1;
    case TRUN_GEN_LEGACY21:
      for (int i = 0; i < COUNT(legacy21_ops); i++)
        if (legacy21_ops[i] == (int)op) return i;
      return -1;
    default: return -1;
  }
}

const char *trun_proto_op_name(trun_op op) { return (unsigned)op < TRUN_OP__COUNT ? op_names[op] : "?"; }

const char *trun_proto_gen_name(trun_gen gen) {
  switch (gen) {
    case TRUN_GEN_V2: return "v2";
    case TRUN_GEN_LEGACY113: return "legacy-1.13";
    case TRUN_GEN_LEGACY21: return "legacy-2.1";
    default: return "unknown";
  }
}
