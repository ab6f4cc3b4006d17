/* torchrun's command line: argv + PET_* environment parsing over the settings table (config/options.h), and
 * --help. Values stay strings with their source; config/config.c turns them into the typed config. */
#ifndef TRUN_CLI_H
#define TRUN_CLI_H

#include <stdio.h>

#include "config/config.h"

/* Parses argv (argv[0] is the program) with torchrun's rules: --opt value, --opt=value, unambiguous long
 * prefixes, both spellings, -m/-r/-t, the first positional is the script and everything after it goes to the
 * script. Options not given on the command line take PET_<NAME> from envp, then the default.
 * Returns 0, or -1 with a one-line reason in err (the caller exits 2). */
/* The training script is optional when --config is given (the file may name it). */
int trun_cli_parse(int argc, char **argv, char **envp, trun_settings *out, char *err, size_t errlen);
void trun_cli_help(FILE *f);

#endif
