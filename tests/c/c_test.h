/* c_test.h: the checks of the C tests. A failed check counts a failure,
 * names the test and the library's last error, and returns from the test. */
#ifndef SHMSEM_C_TEST_H
#define SHMSEM_C_TEST_H

#include <shmsem/shmsem.h>

#include <stdio.h>
#include <time.h>

static int failures;
static const char* current;

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "%s:%d: %s: CHECK(%s) failed (last error: %s)\n", __FILE__, __LINE__, \
              current, #cond, shmsem_last_error());                                         \
      ++failures;                                                                           \
      return;                                                                               \
    }                                                                                       \
  } while (0)

#define CHECK_RC(call, want)                                                                      \
  do {                                                                                            \
    const long long rc_ = (long long)(call);                                                      \
    if (rc_ != (long long)(want)) {                                                               \
      fprintf(stderr, "%s:%d: %s: %s returned %lld (%s), want %lld (last error: %s)\n", __FILE__, \
              __LINE__, current, #call, rc_, shmsem_strerror((int)rc_), (long long)(want),        \
              shmsem_last_error());                                                               \
      ++failures;                                                                                 \
      return;                                                                                     \
    }                                                                                             \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#endif /* SHMSEM_C_TEST_H */
