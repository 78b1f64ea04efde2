/* dlopen_test.c: libshmsem.so.0 loads into a process that has already
 * started, the way Python's ctypes, PHP's FFI and Node's ffi load it. This
 * program is not linked to the library; it opens it at run time.
 *
 * Usage: shmsem-dlopen-test PATH-TO-libshmsem.so.0
 */
#include <dlfcn.h>
#include <stdio.h>

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
  printf("dlopen_test: loaded %s\n", argv[1]);
  return dlclose(lib) == 0 ? 0 : 1;
}
