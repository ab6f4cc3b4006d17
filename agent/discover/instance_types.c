/* Instance type table (agent/discover/instance_types.h); values from spec §2 (EFA counts A4/X1/A3, bandwidth
 * K1). */
#include "instance_types.h"

#include <string.h>

static const trun_instance_info table[] = {
    {"p4d.24xlarge", 8, 4, 400, 1},        {"p4de.24xlarge", 8, 4, 400, 1},
    {"p5.48xlarge", 8, 32, 3200, 1},       {"p5.4xlarge", 1, 1, 100, 0},
    {"p5e.48xlarge", 8, 32, 3200, 1},      {"p5en.48xlarge", 8, 16, 3200, 1},
    {"p6-b200.48xlarge", 8, 8, 3200, 1},   {"p6-b300.48xlarge", 8, 16, 6400, 1},
    {"p6e-gb200.36xlarge", 4, 4, 3200, 1}, {"g5.48xlarge", 8, 1, 100, 0},
    {"g5.24xlarge", 4, 1, 50, 0},          {"g5.12xlarge", 4, 1, 40, 0},
    {"g5.16xlarge", 1, 1, 25, 0},          {"g5.8xlarge", 1, 1, 25, 0},
    {"g6.48xlarge", 8, 1, 100, 0},         {"g6.24xlarge", 4, 1, 50, 0},
    {"g6.12xlarge", 4, 1, 40, 0},          {"g6e.48xlarge", 8, 4, 400, 0},
    {"g6e.24xlarge", 4, 2, 200, 0},        {"g6e.12xlarge", 4, 1, 100, 0},
};

const trun_instance_info *trun_instance_lookup(const char *type) {
  if (type == NULL) return NULL;
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (strcmp(table[i].type, type) == 0) return &table[i];
  return NULL;
}
