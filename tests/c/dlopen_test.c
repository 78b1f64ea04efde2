/* dlopen_test.c: libshmsem.so.0 loads into a process that has already
 * started, the way Python's ctypes, PHP's FFI and Node's ffi load it, and
 * its C ABI works from there. This program is not linked to the library:
 * it opens it at run time and finds every function with dlsym.
 *
 * Usage: shmsem-dlopen-test PATH-TO-libshmsem.so.0
 */
#define _POSIX_C_SOURCE 200809L

#include <shmsem/shmsem.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The functions used, as pointers of the header's types. */
struct api {
  __typeof__(&shmsem_open) open;
  __typeof__(&shmsem_acquire) acquire;
  __typeof__(&shmsem_release) release;
  __typeof__(&shmsem_used) used;
  __typeof__(&shmsem_close) close;
  __typeof__(&shmsem_remove) remove;
  __typeof__(&shmsem_last_error) last_error;
};

static void* find(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (!f) fprintf(stderr, "dlopen_test: %s\n", dlerror());
  return f;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH-TO-libshmsem.so.0\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen_test: %s\n", dlerror());
    return 1;
  }
  struct api f;
  /* POSIX: the address dlsym returns converts to a function pointer. */
#define LOAD(field, name)                 \
  do {                                    \
    void* sym_ = find(lib, name);         \
    memcpy(&f.field, &sym_, sizeof sym_); \
  } while (0)
  LOAD(open, "shmsem_open");
  LOAD(acquire, "shmsem_acquire");
  LOAD(release, "shmsem_release");
  LOAD(used, "shmsem_used");
  LOAD(close, "shmsem_close");
  LOAD(remove, "shmsem_remove");
  LOAD(last_error, "shmsem_last_error");
  if (!f.open || !f.acquire || !f.release || !f.used || !f.close || !f.remove || !f.last_error)
    return 1;

  char key[64];
  snprintf(key, sizeof key, "ctest.dlopen.%ld", (long)getpid());
  shmsem_sem* s = NULL;
  shmsem_permit* p = NULL;
  int rc = f.open(key, 1, &s);
  if (rc == SHMSEM_OK) rc = f.acquire(s, NULL, &p);
  if (rc == SHMSEM_OK && f.used(s) != 1) rc = SHMSEM_EUNKNOWN;
  if (rc == SHMSEM_OK) rc = f.release(p);
  if (rc == SHMSEM_OK && f.used(s) != 0) rc = SHMSEM_EUNKNOWN;
  if (rc != SHMSEM_OK) fprintf(stderr, "dlopen_test: %d: %s\n", rc, f.last_error());
  f.close(s);
  f.remove(key);
  if (rc == SHMSEM_OK) printf("dlopen_test: loaded %s, acquired and released a seat\n", argv[1]);
  return rc == SHMSEM_OK ? 0 : 1;
}
