// sys/clock.cpp: reading the clocks (see clock.hpp).

#include "sys/clock.hpp"

#include <dlfcn.h>

namespace shmsem::sys {

namespace {

// The vDSO's clock_gettime, looked up once. glibc loads the vDSO as the
// shared object "linux-vdso.so.1"; RTLD_NOLOAD only finds it, never loads
// a file. Under valgrind, or on a kernel without a vDSO, the lookup fails
// and glibc's function stays in place.
clock_gettime_fn find_vdso_clock_gettime() noexcept {
  void* vdso = ::dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!vdso) return &::clock_gettime;
#if defined(__x86_64__)
  const char* name = "__vdso_clock_gettime";
#elif defined(__aarch64__)
  const char* name = "__kernel_clock_gettime";
#else
  const char* name = nullptr;
#endif
  void* fn = name ? ::dlsym(vdso, name) : nullptr;
  if (!fn) return &::clock_gettime;
  auto f = reinterpret_cast<clock_gettime_fn>(fn);
  // Trust it only if it answers for both clocks this library reads.
  timespec ts;
  if (f(CLOCK_MONOTONIC_COARSE, &ts) != 0 || f(CLOCK_MONOTONIC, &ts) != 0) return &::clock_gettime;
  return f;
}

}  // namespace

// Constant-initialized to glibc's function, so a read during another
// translation unit's static initialization is still correct.
clock_gettime_fn vdso_clock_gettime = &::clock_gettime;

namespace {
[[maybe_unused]] const bool resolved = (vdso_clock_gettime = find_vdso_clock_gettime(), true);
}  // namespace

}  // namespace shmsem::sys
