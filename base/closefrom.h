/* Closing every descriptor from lowfd up, in a child forked from the threaded agent (async-signal-safe),
 * on any glibc: closefrom(3) arrived in glibc 2.34, and the release binaries are built against 2.31
 * (Debian 11, Ubuntu 20.04) so that they start there. */
#ifndef TRUN_BASE_CLOSEFROM_H
#define TRUN_BASE_CLOSEFROM_H

/* glibc >= 2.34: closefrom. Else close_range(2) (Linux 5.9), else trun__closefrom_scan, else close() up to
 * the open-file limit. */
void trun_closefrom(int lowfd);
/* Closes the descriptors lowfd..highfd (close_range(2), else one close() each), async-signal-safe. */
void trun_close_range(int lowfd, int highfd);
/* Closes what /proc/self/fd lists from lowfd up (getdents64 into a stack buffer, no allocation), reading
 * the directory again until a pass closes nothing. Returns 0, or -1 when /proc/self/fd cannot be read. */
int trun__closefrom_scan(int lowfd);

#endif
