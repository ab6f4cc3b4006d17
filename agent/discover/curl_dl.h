/* libcurl loaded at run time (dlopen), for the one place that needs it (IMDS, discover_instance.c).
 * Linking libcurl would map it and its TLS, LDAP and Kerberos libraries into every agent, about 6 MiB of
 * resident memory for a launcher that otherwise holds 2-3 MiB; loaded on first use, only an agent that
 * asks IMDS pays for it. The types come from <curl/curl.h> at build time; nothing is linked. */
#ifndef TRUN_AGENT_CURL_DL_H
#define TRUN_AGENT_CURL_DL_H

#include <curl/curl.h>
#include <stddef.h>

typedef struct trun_curl {
  CURLcode (*global_init)(long flags);
  void (*global_cleanup)(void);
  curl_version_info_data *(*version_info)(CURLversion v);
  CURL *(*easy_init)(void);
  CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
  CURLcode (*easy_perform)(CURL *h);
  CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
  void (*easy_cleanup)(CURL *h);
  const char *(*easy_strerror)(CURLcode rc);
  struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
  void (*slist_free_all)(struct curl_slist *l);
} trun_curl;

/* Fills api from libcurl.so.4 (else libcurl-gnutls.so.4; TRUN_CURL_LIBRARY names another file). The
 * library stays loaded for the life of the process (never dlclose'd: libcurl's TLS backend registers exit
 * handlers). 0, or -ENOENT / -ENOSYS with the reason in err. */
int trun_curl_load(trun_curl *api, char *err, size_t errlen);

#endif
