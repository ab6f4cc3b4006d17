/* One-line diagnostics: "<prog>: <level>: <message> (<file>:<line>)" on stderr. */
#ifndef TRUN_BASE_LOG_H
#define TRUN_BASE_LOG_H

#define TRUN_LOG_ERROR 0
#define TRUN_LOG_WARN 1
#define TRUN_LOG_INFO 2
#define TRUN_LOG_DEBUG 3

void trun_log_set_prog(const char *prog);
/* Messages above level are dropped (default TRUN_LOG_INFO; env TRUN_LOG_LEVEL=error|warn|info|debug). */
void trun_log_set_level(int level);
int trun_log_level(void);
void trun_log_at(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define trun_error(...) trun_log_at(TRUN_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define trun_warn(...) trun_log_at(TRUN_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define trun_info(...) trun_log_at(TRUN_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define trun_debug(...) trun_log_at(TRUN_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

#endif
