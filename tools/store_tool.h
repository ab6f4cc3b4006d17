/* Small helpers shared by the trun-store subcommands. */
#ifndef TRUN_TOOLS_STORE_TOOL_H
#define TRUN_TOOLS_STORE_TOOL_H

/* Parses a whole decimal integer in [lo, hi]; 0 or -EINVAL / -ERANGE. */
int trun_tool_parse_ll(const char *s, long long lo, long long hi, long long *out);
/* Prints "trun-store: bad value 'V' for OPT" and returns 2 (the usage exit code). */
int trun_tool_bad_arg(const char *opt, const char *val);
/* Writes "<n>\n" to path through a temporary file and rename; 0 or -1 with errno. */
int trun_tool_write_file(const char *path, long long n);

int trun_store_serve_main(int argc, char **argv);
int trun_store_bench_main(int argc, char **argv);
int trun_store_cli_main(int argc, char **argv);

#endif
