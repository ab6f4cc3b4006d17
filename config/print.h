/* `trun --print-config`: every setting's effective value and its source, written as a YAML config file (the
 * sources are comments), so that the output can be fed back with --config. */
#ifndef TRUN_PRINT_H
#define TRUN_PRINT_H

#include <stdio.h>

#include "options.h"

/* Writes s as a YAML scalar: plain when that reads back as the same string, else quoted. */
void trun_yaml_write_scalar(FILE *f, const char *s);
/* The source of option id as shown: "cli", "env PET_NNODES", "file:job.yaml:3", "default",
 * "detected:slurm (SLURM_NNODES)". */
void trun_config_source(const trun_settings *cl, trun_opt_id id, char *buf, size_t len);
/* All settings (only_changed: those not at their default, as --dry-run shows them). */
void trun_print_config(FILE *f, const trun_settings *cl, int only_changed);

#endif
