/* libcurl by dlopen: see curl_dl.h. */
#include "curl_dl.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static void *open_curl(char *err, size_t errlen) {
  const char *lib = getenv("TRUN_CURL_LIBRARY");
  if (lib != NULL && lib[0] != '\0') {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) snprintf(err, errlen, "cannot load TRUN_CURL_LIBRARY=%s: %s", lib, dlerror());
    return h;
  }
  static const char *const names[] = {"libcurl.so.4", "libcurl-gnutls.so.4"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) return h;
  }
  snprintf(err, errlen,
           "libcurl is not installed (neither libcurl.so.4 nor libcurl-gnutls.so.4 loads: %s); "
           "install Debian's libcurl4",
           dlerror());
  return NULL;
}

int trun_curl_load(trun_curl *api, char *err, size_t errlen) {
  void *h = open_curl(err, errlen);
  if (h == NULL) return -ENOENT;
  struct {
    void **slot;
    const char *name;
  } syms[] = {
      {(void **)&api->global_init, "curl_global_init"},
      {(void **)&api->global_cleanup, "curl_global_cleanup"},
      {(void **)&api->version_info, "curl_version_info"},
      {(void **)&api->easy_init, "curl_easy_init"},
      {(void **)&api->easy_setopt, "curl_easy_setopt"},
      {(void **)&api->easy_perform, "curl_easy_perform"},
      {(void **)&api->easy_getinfo, "curl_easy_getinfo"},
      {(void **)&api->easy_cleanup, "curl_easy_cleanup"},
      {(void **)&api->easy_strerror, "curl_easy_strerror"},
      {(void **)&api->slist_append, "curl_slist_append"},
      {(void **)&api->slist_free_all, "curl_slist_free_all"},
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (*syms[i].slot == NULL) {
      snprintf(err, errlen, "libcurl has no %s (too old?); install Debian's libcurl4", syms[i].name);
      return -ENOSYS;
    }
  }
  return 0;
}
