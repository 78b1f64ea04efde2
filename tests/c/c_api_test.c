/* c_api_test.c: the C ABI as a C11 program uses it, across processes.
 * Built with -std=c11 -Wall -Wextra -Werror, so the header is checked as
 * strict C too. Each test uses its own key; processes are synchronised with
 * pipes, never sleeps (the one sleep waits for a TTL to run out).
 *
 * Usage: shmsem-c-api-test [TEST-NAME]   (no name: every test)
 */
#define _POSIX_C_SOURCE 200809L

#include <shmsem/shmsem.h>

#include "c_test.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char key_buf[128];
static const char* key(const char* name) {
  snprintf(key_buf, sizeof key_buf, "ctest.capi.%ld.%s", (long)getpid(), name);
  return key_buf;
}

/* Reads one byte from fd; -1 on EOF or error. */
static int read_byte(int fd) {
  unsigned char c;
  ssize_t r;
  do r = read(fd, &c, 1);
  while (r < 0 && errno == EINTR);
  return r == 1 ? c : -1;
}

static void write_byte(int fd, unsigned char c) {
  ssize_t r;
  do r = write(fd, &c, 1);
  while (r < 0 && errno == EINTR);
}

/* ------------------------------------------------------------------ tests */

static void codes_have_names(void) {
  const int codes[] = {SHMSEM_OK,       SHMSEM_ETIMEDOUT, SHMSEM_EUNAVAILABLE, SHMSEM_ENOTHELD,
                       SHMSEM_EINVAL,   SHMSEM_ESEGMENT,  SHMSEM_ECANCELED,    SHMSEM_ESHUTDOWN,
                       SHMSEM_EEXCEEDS, SHMSEM_EEXTEND,   SHMSEM_EUNKNOWN,     SHMSEM_ENOMEM,
                       SHMSEM_ENOENT,   SHMSEM_EUNTRUSTED, SHMSEM_EINPROGRESS};
  const size_t n = sizeof codes / sizeof codes[0];
  CHECK(SHMSEM_OK == 0);
  for (size_t i = 0; i < n; ++i) {
    CHECK(codes[i] <= 0);
    CHECK(strncmp(shmsem_strerror(codes[i]), "SHMSEM_", 7) == 0);
    for (size_t j = 0; j < i; ++j) CHECK(codes[i] != codes[j]);
  }
  CHECK(strcmp(shmsem_strerror(12345), "unknown code") == 0);
  CHECK(strstr(shmsem_strerror(SHMSEM_ETIMEDOUT), "ETIMEDOUT") != NULL);
  CHECK(shmsem_version()[0] >= '0' && shmsem_version()[0] <= '9');
}

static void bad_arguments_give_einval_and_a_message(void) {
  shmsem_sem* s = (shmsem_sem*)1;
  CHECK_RC(shmsem_open(NULL, 1, &s), SHMSEM_EINVAL);
  CHECK(s == NULL);
  CHECK_RC(shmsem_open("", 1, &s), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "key") != NULL);
  char long_key[300];
  memset(long_key, 'k', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = '\0';
  CHECK_RC(shmsem_open(long_key, 1, &s), SHMSEM_EINVAL);
  CHECK_RC(shmsem_open(key("bad"), 0, &s), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), key("bad")) != NULL);
  CHECK_RC(shmsem_open(key("bad"), 2000000, &s), SHMSEM_EINVAL);
  CHECK(s == NULL);

  CHECK_RC(shmsem_open(key("bad"), 2, &s), SHMSEM_OK);
  shmsem_permit* p = NULL;
  shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
  o.n = 0;
  CHECK_RC(shmsem_acquire(s, &o, &p), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), key("bad")) != NULL);
  CHECK_RC(shmsem_try_acquire(s, 0, &p), SHMSEM_EINVAL);
  o.n = 1;
  o.ttl_ms = -5;
  CHECK_RC(shmsem_acquire(s, &o, &p), SHMSEM_EINVAL);
  o.ttl_ms = 0;
  o.size = 4; /* smaller than any version of the struct */
  CHECK_RC(shmsem_acquire(s, &o, &p), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "size") != NULL);
  CHECK(p == NULL);
  CHECK_RC(shmsem_acquire(NULL, NULL, &p), SHMSEM_EINVAL);
  CHECK_RC(shmsem_release(NULL), SHMSEM_EINVAL);
  CHECK_RC(shmsem_used(NULL), SHMSEM_EINVAL);
  CHECK_RC(shmsem_set_capacity(s, 0), SHMSEM_EINVAL);
  shmsem_close(NULL);
  shmsem_close(s);
  CHECK_RC(shmsem_remove(key("bad")), 1);
}

static void last_error_is_per_thread_and_kept_until_the_next_failure(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open("", 1, &s), SHMSEM_EINVAL);
  char before[512];
  snprintf(before, sizeof before, "%s", shmsem_last_error());
  CHECK(before[0] != '\0');
  CHECK_RC(shmsem_open(key("lasterr"), 1, &s), SHMSEM_OK);
  CHECK(strcmp(shmsem_last_error(), before) == 0); /* a success leaves it */
  shmsem_close(s);
  shmsem_remove(key("lasterr"));
}

static void* other_thread_last_error(void* arg) {
  (void)arg;
  return (void*)(shmsem_last_error()[0] == '\0' ? "empty" : "set");
}

static void last_error_of_another_thread_is_its_own(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open("", 1, &s), SHMSEM_EINVAL);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, other_thread_last_error, NULL) == 0);
  void* r = NULL;
  pthread_join(t, &r);
  CHECK(strcmp((const char*)r, "empty") == 0);
}

static void acquire_try_acquire_and_figures(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("basic"), 3, &s), SHMSEM_OK);
  CHECK(strcmp(shmsem_key(s), key("basic")) == 0);
  CHECK_RC(shmsem_capacity(s), 3);
  CHECK_RC(shmsem_used(s), 0);

  shmsem_permit* two = NULL;
  shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
  o.n = 2;
  CHECK_RC(shmsem_acquire(s, &o, &two), SHMSEM_OK);
  CHECK(two != NULL);
  CHECK_RC(shmsem_permit_weight(two), 2);
  CHECK(shmsem_permit_id(two) != 0);
  CHECK_RC(shmsem_is_held(two), 1);
  CHECK_RC(shmsem_used(s), 2);
  CHECK_RC(shmsem_available(s), 1);
  CHECK_RC(shmsem_waiters(s), 0);

  shmsem_permit* p = (shmsem_permit*)1;
  CHECK_RC(shmsem_try_acquire(s, 2, &p), SHMSEM_EUNAVAILABLE);
  CHECK(p == NULL);
  CHECK(strstr(shmsem_last_error(), key("basic")) != NULL);
  CHECK_RC(shmsem_try_acquire(s, 4, &p), SHMSEM_EUNAVAILABLE); /* n > capacity */
  o.n = 4;
  CHECK_RC(shmsem_acquire(s, &o, &p), SHMSEM_EEXCEEDS);
  o.n = 2;
  o.wait_timeout_ms = 0;
  CHECK_RC(shmsem_acquire(s, &o, &p), SHMSEM_ETIMEDOUT);
  o.wait_timeout_ms = 30;
  const double t0 = now_ms();
  CHECK_RC(shmsem_acquire(s, &o, &p), SHMSEM_ETIMEDOUT);
  CHECK(now_ms() - t0 >= 25);

  shmsem_permit* one = NULL;
  CHECK_RC(shmsem_try_acquire(s, 1, &one), SHMSEM_OK);
  CHECK(shmsem_permit_id(one) != shmsem_permit_id(two));
  CHECK_RC(shmsem_used(s), 3);
  CHECK_RC(shmsem_release(one), SHMSEM_OK);
  CHECK_RC(shmsem_acquire(s, NULL, &one), SHMSEM_OK); /* NULL options: one seat */
  CHECK_RC(shmsem_permit_weight(one), 1);
  CHECK_RC(shmsem_release(one), SHMSEM_OK);
  CHECK_RC(shmsem_release(two), SHMSEM_OK);
  CHECK_RC(shmsem_used(s), 0);

  shmsem_stats st = SHMSEM_STATS_INIT;
  CHECK_RC(shmsem_get_stats(s, &st), SHMSEM_OK);
  CHECK(st.acquired == 3 && st.released == 3);
  CHECK(st.try_failures == 2 && st.timeouts == 2 && st.rejected == 1);
  shmsem_close(s);
  CHECK_RC(shmsem_remove(key("basic")), 1);
  CHECK_RC(shmsem_remove(key("basic")), 0);
}

static void permits_outlive_their_handle(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("outlive"), 1, &s), SHMSEM_OK);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &p), SHMSEM_OK);
  shmsem_close(s);
  CHECK_RC(shmsem_is_held(p), 1);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  CHECK_RC(shmsem_open(key("outlive"), 1, &s), SHMSEM_OK);
  CHECK_RC(shmsem_used(s), 0);
  shmsem_close(s);
  shmsem_remove(key("outlive"));
}

/* Runs a misuse test in a child process, so that a crash there (what such
 * misuse did before the library caught it) fails this test, not the run. */
static void in_child(void (*fn)(void)) {
  fflush(NULL);
  const pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    failures = 0;
    fn();
    _exit(failures == 0 ? 0 : 1);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) fprintf(stderr, "%s: killed by signal %d\n", current, WTERMSIG(status));
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void second_release(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("release2"), 2, &s), SHMSEM_OK);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &p), SHMSEM_OK);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  CHECK_RC(shmsem_release(p), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "shmsem_release(): p was released already") != NULL);
  CHECK_RC(shmsem_is_held(p), SHMSEM_EINVAL);
  CHECK_RC(shmsem_extend(p, 1000), SHMSEM_EINVAL);
  CHECK_RC(shmsem_permit_weight(p), SHMSEM_EINVAL);
  CHECK(shmsem_permit_id(p) == 0 && shmsem_permit_fencing_token(p) == 0);
  /* A permit taken since is another handle: the stale one cannot free its seat. */
  shmsem_permit* q = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &q), SHMSEM_OK);
  CHECK(q != p);
  CHECK_RC(shmsem_release(p), SHMSEM_EINVAL);
  CHECK_RC(shmsem_used(s), 1);
  CHECK_RC(shmsem_release(q), SHMSEM_OK);
  /* A release that reports lost seats frees the permit all the same. */
  CHECK_RC(shmsem_acquire(s, NULL, &p), SHMSEM_OK);
  CHECK_RC(shmsem_force_release_all(s), 1);
  CHECK_RC(shmsem_release(p), SHMSEM_ENOTHELD);
  CHECK_RC(shmsem_release(p), SHMSEM_EINVAL);
  CHECK_RC(shmsem_used(s), 0);
  shmsem_close(s);
  shmsem_remove(key("release2"));
}

static void second_release_is_refused_not_a_crash(void) {
  in_child(second_release);
}

static void use_after_close(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("close2"), 1, &s), SHMSEM_OK);
  shmsem_close(s);
  shmsem_close(s);
  CHECK(strstr(shmsem_last_error(), "shmsem_close(): s was closed already") != NULL);
  CHECK_RC(shmsem_capacity(s), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "shmsem_capacity(): s was closed already") != NULL);
  shmsem_permit* p = (shmsem_permit*)1;
  CHECK_RC(shmsem_acquire(s, NULL, &p), SHMSEM_EINVAL);
  CHECK(p == NULL);
  CHECK_RC(shmsem_try_acquire(s, 1, &p), SHMSEM_EINVAL);
  CHECK_RC(shmsem_set_capacity(s, 2), SHMSEM_EINVAL);
  CHECK_RC(shmsem_reap(s), SHMSEM_EINVAL);
  CHECK(shmsem_key(s) == NULL);

  shmsem_cancel_token* t = NULL;
  CHECK_RC(shmsem_cancel_token_new(&t), SHMSEM_OK);
  shmsem_cancel_token_free(t);
  shmsem_cancel_token_free(t);
  CHECK(strstr(shmsem_last_error(), "t was freed already") != NULL);
  CHECK_RC(shmsem_cancel(t), SHMSEM_EINVAL);
  CHECK_RC(shmsem_cancel_token_cancelled(t), SHMSEM_EINVAL);
  CHECK_RC(shmsem_open(key("close2"), 1, &s), SHMSEM_OK);
  CHECK_RC(shmsem_acquire_cancellable(s, NULL, t, &p), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "cancel was freed already") != NULL);
  CHECK_RC(shmsem_used(s), 0);
  shmsem_close(s);
  shmsem_remove(key("close2"));
}

static void use_after_close_is_refused_not_a_crash(void) {
  in_child(use_after_close);
}

static void ttl_extend_and_lost_seats(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("ttl"), 1, &s), SHMSEM_OK);
  shmsem_permit* p = NULL;
  shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
  o.ttl_ms = 60000;
  CHECK_RC(shmsem_acquire(s, &o, &p), SHMSEM_OK);
  shmsem_holder h[4];
  CHECK_RC(shmsem_holders(s, h, 4, sizeof h[0]), 1);
  CHECK(h[0].pid == getpid() && h[0].weight == 1 && h[0].permit_id == shmsem_permit_id(p));
  CHECK(h[0].expires_ns > h[0].acquired_ns && h[0].state == SHMSEM_HOLDER_ALIVE);
  CHECK_RC(shmsem_holders(s, NULL, 0, 0), 1); /* just the count */
  CHECK_RC(shmsem_holders(s, h, 4, 8), SHMSEM_EINVAL);
  CHECK_RC(shmsem_extend(p, 30), SHMSEM_OK); /* shortened: lapses in 30 ms */
  CHECK_RC(shmsem_extend(p, 0), SHMSEM_EINVAL);
  /* In the caller's words: the range, not a name from the C++ headers. */
  CHECK(strstr(shmsem_last_error(), "from 1 ms to 1000000000 ms") != NULL);
  CHECK(strstr(shmsem_last_error(), key("ttl")) != NULL);
  CHECK(strstr(shmsem_last_error(), "kMax") == NULL);
  const struct timespec nap = {0, 150 * 1000 * 1000};
  nanosleep(&nap, NULL); /* the lapse is the behaviour under test */
  CHECK_RC(shmsem_is_held(p), 0);
  CHECK_RC(shmsem_extend(p, 1000), SHMSEM_EEXTEND);
  CHECK(strstr(shmsem_last_error(), key("ttl")) != NULL);
  CHECK_RC(shmsem_release(p), SHMSEM_ENOTHELD); /* and p is freed */
  CHECK(strstr(shmsem_last_error(), "TTL ran out") != NULL);
  CHECK_RC(shmsem_used(s), 0);
  shmsem_close(s);
  shmsem_remove(key("ttl"));
}

static void open_options_default_ttl_and_nocreate(void) {
  shmsem_sem* s = NULL;
  shmsem_open_options oo = SHMSEM_OPEN_OPTIONS_INIT;
  oo.flags = SHMSEM_OPEN_NOCREATE;
  CHECK_RC(shmsem_open_ex(key("openex"), 0, &oo, &s), SHMSEM_ENOENT);
  CHECK(s == NULL);
  oo.flags = 0;
  oo.default_ttl_ms = 60000;
  CHECK_RC(shmsem_open_ex(key("openex"), 2, &oo, &s), SHMSEM_OK);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &p), SHMSEM_OK);
  shmsem_holder h;
  CHECK_RC(shmsem_holders(s, &h, 1, sizeof h), 1);
  CHECK(h.expires_ns != 0); /* the handle's default TTL */
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT; /* ttl_ms 0: none, default or not */
  CHECK_RC(shmsem_acquire(s, &o, &p), SHMSEM_OK);
  CHECK_RC(shmsem_holders(s, &h, 1, sizeof h), 1);
  CHECK(h.expires_ns == 0);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);

  /* An attach with NOCREATE sees the same seats. */
  shmsem_sem* t = NULL;
  oo = (shmsem_open_options)SHMSEM_OPEN_OPTIONS_INIT;
  oo.flags = SHMSEM_OPEN_NOCREATE;
  CHECK_RC(shmsem_open_ex(key("openex"), 0, &oo, &t), SHMSEM_OK);
  CHECK_RC(shmsem_capacity(t), 2);
  shmsem_close(t);

  /* A newer caller's longer struct: unknown zero bytes pass, others do not. */
  struct {
    shmsem_open_options known;
    uint64_t later_field;
  } newer = {SHMSEM_OPEN_OPTIONS_INIT, 0};
  newer.known.size = sizeof newer;
  CHECK_RC(shmsem_open_ex(key("openex"), 2, &newer.known, &t), SHMSEM_OK);
  shmsem_close(t);
  newer.later_field = 7;
  CHECK_RC(shmsem_open_ex(key("openex"), 2, &newer.known, &t), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "does not know") != NULL);
  oo = (shmsem_open_options)SHMSEM_OPEN_OPTIONS_INIT;
  oo.flags = 0x80;
  CHECK_RC(shmsem_open_ex(key("openex"), 2, &oo, &t), SHMSEM_EINVAL);
  /* The fairness policy is the creator's; Redis keys are always FIFO. */
  oo.flags = SHMSEM_OPEN_BARGING;
  CHECK_RC(shmsem_open_ex(key("barging"), 1, &oo, &t), SHMSEM_OK);
  CHECK_RC(shmsem_is_barging(t), 1);
  shmsem_close(t);
  oo.flags = SHMSEM_OPEN_FIFO; /* asks for fifo: gets the stored barging */
  CHECK_RC(shmsem_open_ex(key("barging"), 1, &oo, &t), SHMSEM_OK);
  CHECK_RC(shmsem_is_barging(t), 1);
  shmsem_close(t);
  CHECK_RC(shmsem_open_ex(key("fifo"), 1, &oo, &t), SHMSEM_OK);
  CHECK_RC(shmsem_is_barging(t), 0);
  shmsem_close(t);
  shmsem_remove(key("fifo"));
  oo.flags = SHMSEM_OPEN_FIFO | SHMSEM_OPEN_BARGING;
  CHECK_RC(shmsem_open_ex(key("both"), 1, &oo, &t), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "together") != NULL);
  CHECK_RC(shmsem_is_barging(s), 1); /* no flag: the default */
  CHECK_RC(shmsem_is_barging(NULL), SHMSEM_EINVAL);
  /* Shared memory can do everything but fencing, which `s` was not opened with. */
  CHECK_RC(shmsem_capabilities(s), SHMSEM_CAP_READS_WITHOUT_IO | SHMSEM_CAP_BARGING |
                                       SHMSEM_CAP_PROCESS_LIVENESS | SHMSEM_CAP_SEGMENT_FILE);
  CHECK_RC(shmsem_capabilities(NULL), SHMSEM_EINVAL);
  oo.flags = SHMSEM_OPEN_BARGING;
  shmsem_remove(key("barging"));
  CHECK_RC(shmsem_open_ex("redis://127.0.0.1:1/barging", 1, &oo, &t), SHMSEM_EINVAL);
#ifdef SHMSEM_WITH_REDIS
  CHECK(strstr(shmsem_last_error(), "FIFO") != NULL);
#else
  CHECK(strstr(shmsem_last_error(), "SHMSEM_WITH_REDIS=OFF") != NULL);
#endif
  shmsem_close(s);
  shmsem_remove(key("openex"));
}

static void force_release_all_reports_displaced_permits(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("force"), 2, &s), SHMSEM_OK);
  shmsem_permit *a = NULL, *b = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &a), SHMSEM_OK);
  CHECK_RC(shmsem_acquire(s, NULL, &b), SHMSEM_OK);
  CHECK_RC(shmsem_force_release_all(s), 2);
  CHECK_RC(shmsem_used(s), 0);
  CHECK_RC(shmsem_is_held(a), 0);
  CHECK_RC(shmsem_release(a), SHMSEM_ENOTHELD);
  CHECK_RC(shmsem_release(b), SHMSEM_ENOTHELD);
  CHECK_RC(shmsem_force_release_all(s), 0);
  shmsem_close(s);
  shmsem_remove(key("force"));
}

static void set_capacity_grows_and_shrinks(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("resize"), 1, &s), SHMSEM_OK);
  shmsem_permit *a = NULL, *b = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &a), SHMSEM_OK);
  CHECK_RC(shmsem_try_acquire(s, 1, &b), SHMSEM_EUNAVAILABLE);
  CHECK_RC(shmsem_set_capacity(s, 2), SHMSEM_OK);
  CHECK_RC(shmsem_capacity(s), 2);
  CHECK_RC(shmsem_try_acquire(s, 1, &b), SHMSEM_OK);
  CHECK_RC(shmsem_set_capacity(s, 1), SHMSEM_OK);
  CHECK_RC(shmsem_used(s), 2); /* a shrink takes no seat away */
  CHECK_RC(shmsem_available(s), 0);
  CHECK_RC(shmsem_release(a), SHMSEM_OK);
  CHECK_RC(shmsem_release(b), SHMSEM_OK);
  shmsem_close(s);
  shmsem_remove(key("resize"));
}

struct blocked_acquire {
  shmsem_sem* s;
  shmsem_cancel_token* token;
  int rc;
  shmsem_permit* p;
};

static void* acquire_in_thread(void* arg) {
  struct blocked_acquire* b = arg;
  b->rc = shmsem_acquire_cancellable(b->s, NULL, b->token, &b->p);
  return NULL;
}

/* Waits (briefly polling a lock-free figure) until the semaphore has `n` waiters. */
static int await_waiters(shmsem_sem* s, int n) {
  const double deadline = now_ms() + 10000;
  while (shmsem_waiters(s) != n) {
    if (now_ms() > deadline) return 0;
    const struct timespec nap = {0, 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  return 1;
}

static void cancel_token_ends_a_blocked_acquire(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("cancel"), 1, &s), SHMSEM_OK);
  shmsem_permit* held = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &held), SHMSEM_OK);
  struct blocked_acquire b = {s, NULL, 1, NULL};
  CHECK_RC(shmsem_cancel_token_new(&b.token), SHMSEM_OK);
  CHECK_RC(shmsem_cancel_token_cancelled(b.token), 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, acquire_in_thread, &b) == 0);
  CHECK(await_waiters(s, 1));
  const double t0 = now_ms();
  CHECK_RC(shmsem_cancel(b.token), SHMSEM_OK);
  pthread_join(t, NULL);
  printf("c_api_test: a cancelled acquire returned %.2f ms after shmsem_cancel\n", now_ms() - t0);
  CHECK_RC(b.rc, SHMSEM_ECANCELED);
  CHECK(b.p == NULL);
  CHECK_RC(shmsem_waiters(s), 0);
  CHECK_RC(shmsem_used(s), 1);

  /* Cancelled before the call: fails at once, even with a free seat. */
  CHECK_RC(shmsem_release(held), SHMSEM_OK);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire_cancellable(s, NULL, b.token, &p), SHMSEM_ECANCELED);
  CHECK_RC(shmsem_cancel_token_reset(b.token), SHMSEM_OK);
  CHECK_RC(shmsem_acquire_cancellable(s, NULL, b.token, &p), SHMSEM_OK);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  shmsem_stats st = SHMSEM_STATS_INIT;
  CHECK_RC(shmsem_get_stats(s, &st), SHMSEM_OK);
  CHECK(st.cancelled == 1);
  shmsem_cancel_token_free(b.token);
  shmsem_close(s);
  shmsem_remove(key("cancel"));
}

/* What the callbacks of asynchronous acquires report, under a mutex. A
 * callback that gets a permit releases it at once when `release` is set. */
struct async_results {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  int granted;
  int last_status;
  shmsem_permit* last_permit;
  int on_caller_thread;
  pthread_t caller;
  int release;
};

static void async_results_init(struct async_results* r, int release) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->caller = pthread_self();
  r->release = release;
}

static void async_results_destroy(struct async_results* r) {
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
}

static void record_async(int status, shmsem_permit* permit, void* ctx) {
  struct async_results* r = ctx;
  if (permit && r->release) {
    shmsem_release(permit);
    permit = NULL;
  }
  pthread_mutex_lock(&r->mu);
  ++r->calls;
  if (status == SHMSEM_OK) ++r->granted;
  r->last_status = status;
  r->last_permit = permit;
  if (pthread_equal(pthread_self(), r->caller)) r->on_caller_thread = 1;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* Waits up to 10 s until `calls` callbacks have run; 1 if they have. */
static int await_calls(struct async_results* r, int calls) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  pthread_mutex_lock(&r->mu);
  int rc = 0;
  while (r->calls < calls && rc == 0) rc = pthread_cond_timedwait(&r->cv, &r->mu, &until);
  const int ok = r->calls >= calls;
  pthread_mutex_unlock(&r->mu);
  return ok;
}

static int async_calls(struct async_results* r) {
  pthread_mutex_lock(&r->mu);
  const int n = r->calls;
  pthread_mutex_unlock(&r->mu);
  return n;
}

static void async_acquire_of_a_free_seat_completes_at_once(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("async-free"), 1, &s), SHMSEM_OK);
  struct async_results r;
  async_results_init(&r, 0);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire_async(s, NULL, NULL, record_async, &r, &p), SHMSEM_OK);
  CHECK(p != NULL);
  CHECK_RC(shmsem_used(s), 1);
  /* Taken: n > capacity without waiting fails at once too. */
  shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
  o.n = 2;
  o.wait_timeout_ms = 0;
  shmsem_permit* q = NULL;
  CHECK_RC(shmsem_acquire_async(s, &o, NULL, record_async, &r, &q), SHMSEM_EEXCEEDS);
  CHECK_RC(shmsem_acquire_async(s, NULL, NULL, NULL, &r, &q), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "done") != NULL);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  CHECK_RC(async_calls(&r), 0); /* never called for an answer given at once */
  async_results_destroy(&r);
  shmsem_close(s);
  shmsem_remove(key("async-free"));
}

static void async_acquire_waits_on_a_library_thread_until_granted(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("async-wait"), 1, &s), SHMSEM_OK);
  shmsem_permit* held = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &held), SHMSEM_OK);
  struct async_results r;
  async_results_init(&r, 0);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire_async(s, NULL, NULL, record_async, &r, &p), SHMSEM_EINPROGRESS);
  CHECK(p == NULL);
  CHECK(await_waiters(s, 1));
  CHECK_RC(async_calls(&r), 0);
  CHECK_RC(shmsem_release(held), SHMSEM_OK);
  CHECK(await_calls(&r, 1));
  CHECK_RC(r.last_status, SHMSEM_OK);
  CHECK(r.last_permit != NULL);
  CHECK(!r.on_caller_thread);
  CHECK_RC(shmsem_is_held(r.last_permit), 1);
  CHECK_RC(shmsem_used(s), 1);
  CHECK_RC(shmsem_release(r.last_permit), SHMSEM_OK);

  /* A budget that runs out ends it with a timeout. */
  CHECK_RC(shmsem_acquire(s, NULL, &held), SHMSEM_OK);
  shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
  o.wait_timeout_ms = 50;
  CHECK_RC(shmsem_acquire_async(s, &o, NULL, record_async, &r, &p), SHMSEM_EINPROGRESS);
  CHECK(await_calls(&r, 2));
  CHECK_RC(r.last_status, SHMSEM_ETIMEDOUT);
  CHECK(r.last_permit == NULL);
  CHECK_RC(shmsem_waiters(s), 0);
  CHECK_RC(shmsem_release(held), SHMSEM_OK);
  async_results_destroy(&r);
  shmsem_close(s);
  shmsem_remove(key("async-wait"));
}

static void cancelling_an_async_acquire_withdraws_it(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("async-cancel"), 1, &s), SHMSEM_OK);
  shmsem_permit* held = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &held), SHMSEM_OK);
  shmsem_cancel_token* t = NULL;
  CHECK_RC(shmsem_cancel_token_new(&t), SHMSEM_OK);
  struct async_results r;
  async_results_init(&r, 0);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire_async(s, NULL, t, record_async, &r, &p), SHMSEM_EINPROGRESS);
  CHECK(await_waiters(s, 1));
  CHECK_RC(shmsem_cancel(t), SHMSEM_OK);
  CHECK(await_calls(&r, 1));
  CHECK_RC(r.last_status, SHMSEM_ECANCELED);
  CHECK(r.last_permit == NULL);
  CHECK_RC(shmsem_waiters(s), 0);
  CHECK_RC(shmsem_used(s), 1);
  /* Cancelled before the call: at once, and no callback. */
  CHECK_RC(shmsem_acquire_async(s, NULL, t, record_async, &r, &p), SHMSEM_ECANCELED);
  CHECK_RC(async_calls(&r), 1);
  CHECK_RC(shmsem_release(held), SHMSEM_OK);
  shmsem_cancel_token_free(t);
  async_results_destroy(&r);
  shmsem_close(s);
  shmsem_remove(key("async-cancel"));
}

static void close_ends_async_acquires_and_waits_for_their_callbacks(void) {
  shmsem_sem* s = NULL;
  shmsem_sem* other = NULL;
  CHECK_RC(shmsem_open(key("async-close"), 1, &s), SHMSEM_OK);
  CHECK_RC(shmsem_open(key("async-close"), 1, &other), SHMSEM_OK);
  shmsem_permit* held = NULL;
  CHECK_RC(shmsem_acquire(other, NULL, &held), SHMSEM_OK);
  struct async_results r;
  async_results_init(&r, 0);
  shmsem_permit* p = NULL;
  for (int i = 0; i < 3; ++i)
    CHECK_RC(shmsem_acquire_async(s, NULL, NULL, record_async, &r, &p), SHMSEM_EINPROGRESS);
  CHECK(await_waiters(other, 3));
  shmsem_close(s);
  CHECK_RC(async_calls(&r), 3); /* every callback ran before close returned */
  CHECK_RC(r.last_status, SHMSEM_ECANCELED);
  CHECK_RC(shmsem_waiters(other), 0);
  CHECK_RC(shmsem_release(held), SHMSEM_OK);
  async_results_destroy(&r);
  shmsem_close(other);
  shmsem_remove(key("async-close"));
}

/* Two hundred requests wait at once, each on the library's thread, and are
 * served one by one as each callback releases its seat. */
static void two_hundred_async_acquires_wait_at_once(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("async-200"), 1, &s), SHMSEM_OK);
  shmsem_permit* held = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &held), SHMSEM_OK);
  struct async_results r;
  async_results_init(&r, 1);
  enum { kRequests = 200 };
  for (int i = 0; i < kRequests; ++i) {
    shmsem_permit* p = NULL;
    CHECK_RC(shmsem_acquire_async(s, NULL, NULL, record_async, &r, &p), SHMSEM_EINPROGRESS);
  }
  CHECK(await_waiters(s, kRequests));
  CHECK_RC(async_calls(&r), 0);
  CHECK_RC(shmsem_release(held), SHMSEM_OK);
  CHECK(await_calls(&r, kRequests));
  CHECK_RC(r.granted, kRequests);
  CHECK(!r.on_caller_thread);
  CHECK_RC(shmsem_used(s), 0);
  async_results_destroy(&r);
  shmsem_close(s);
  shmsem_remove(key("async-200"));
}

/* A child forked while a request waits has no part in it: its close does
 * not wait for a callback that would never come. */
static void forked_child_does_not_wait_for_its_parents_async_acquires(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("async-fork"), 1, &s), SHMSEM_OK);
  shmsem_permit* held = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &held), SHMSEM_OK);
  struct async_results r;
  async_results_init(&r, 0);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire_async(s, NULL, NULL, record_async, &r, &p), SHMSEM_EINPROGRESS);
  CHECK(await_waiters(s, 1));
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    shmsem_close(s);
    _exit(0);
  }
  int st = 0;
  const double deadline = now_ms() + 10000;
  pid_t w;
  while ((w = waitpid(child, &st, WNOHANG)) == 0 && now_ms() < deadline) {
    const struct timespec nap = {0, 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  if (w == 0) {
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
  }
  CHECK(w == child);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK_RC(async_calls(&r), 0);
  CHECK_RC(shmsem_release(held), SHMSEM_OK);
  CHECK(await_calls(&r, 1));
  CHECK_RC(r.last_status, SHMSEM_OK);
  CHECK_RC(shmsem_release(r.last_permit), SHMSEM_OK);
  async_results_destroy(&r);
  shmsem_close(s);
  shmsem_remove(key("async-fork"));
}

static void shutdown_ends_acquires(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("shutdown"), 1, &s), SHMSEM_OK);
  shmsem_permit* held = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &held), SHMSEM_OK);
  struct blocked_acquire b = {s, NULL, 1, NULL};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, acquire_in_thread, &b) == 0);
  CHECK(await_waiters(s, 1));
  CHECK_RC(shmsem_shutdown(s), SHMSEM_OK);
  pthread_join(t, NULL);
  CHECK_RC(b.rc, SHMSEM_ESHUTDOWN);
  CHECK_RC(shmsem_is_held(held), 1); /* shutdown does not release */
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &p), SHMSEM_ESHUTDOWN);
  CHECK_RC(shmsem_release(held), SHMSEM_OK);
  shmsem_close(s);
  shmsem_remove(key("shutdown"));
}

static void wait_idle_reports_idle_or_timeout(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("idle"), 1, &s), SHMSEM_OK);
  CHECK_RC(shmsem_wait_idle(s, 0), 1);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &p), SHMSEM_OK);
  CHECK_RC(shmsem_wait_idle(s, 20), 0);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  CHECK_RC(shmsem_wait_idle(s, 1000), 1);
  shmsem_close(s);
  shmsem_remove(key("idle"));
}

struct log_capture {
  int lines;
  int level;
  char last[512];
};

static void capture_log(int level, const char* message, void* ctx) {
  struct log_capture* c = ctx;
  ++c->lines;
  c->level = level;
  snprintf(c->last, sizeof c->last, "%s", message);
}

static void log_lines_reach_the_handler(void) {
  struct log_capture c = {0, 0, ""};
  CHECK_RC(shmsem_set_log_handler(capture_log, &c, SHMSEM_LOG_WARN), SHMSEM_OK);
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("log"), 1, &s), SHMSEM_OK);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &p), SHMSEM_OK);
  CHECK_RC(shmsem_force_release_all(s), 1);
  shmsem_set_log_handler(NULL, NULL, 0);
  CHECK(c.lines >= 1);
  CHECK(c.level == SHMSEM_LOG_WARN);
  CHECK(strstr(c.last, key("log")) != NULL);
  CHECK_RC(shmsem_release(p), SHMSEM_ENOTHELD);
  shmsem_close(s);
  shmsem_remove(key("log"));
}

/* A holder in another process is SIGKILLed while it holds the only seat;
 * a waiter here gets the seat back. The child uses the handle it inherited
 * across fork(). */
static void seat_of_a_killed_holder_comes_back(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("kill"), 1, &s), SHMSEM_OK);
  int up[2];
  CHECK(pipe(up) == 0);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    close(up[0]);
    shmsem_permit* p = NULL;
    if (shmsem_acquire(s, NULL, &p) != SHMSEM_OK) _exit(3);
    write_byte(up[1], 'H');
    for (;;) pause();
  }
  close(up[1]);
  CHECK(read_byte(up[0]) == 'H');
  close(up[0]);
  CHECK_RC(shmsem_used(s), 1);
  shmsem_holder h;
  CHECK_RC(shmsem_holders(s, &h, 1, sizeof h), 1);
  CHECK(h.pid == child && h.state == SHMSEM_HOLDER_ALIVE);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_try_acquire(s, 1, &p), SHMSEM_EUNAVAILABLE);

  const double t0 = now_ms();
  kill(child, SIGKILL); /* not reaped by waitpid yet: a zombie is dead too */
  shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
  o.wait_timeout_ms = 10000;
  const int rc = shmsem_acquire(s, &o, &p);
  const double took = now_ms() - t0;
  int status = 0;
  waitpid(child, &status, 0);
  CHECK_RC(rc, SHMSEM_OK);
  printf("c_api_test: the seat of a SIGKILLed holder came back in %.1f ms\n", took);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  shmsem_stats st = SHMSEM_STATS_INIT;
  CHECK_RC(shmsem_get_stats(s, &st), SHMSEM_OK);
  CHECK(st.reaped == 1 && st.reclaimed_seats == 1);
  CHECK_RC(shmsem_reap(s), 0);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  shmsem_close(s);
  shmsem_remove(key("kill"));
}

/* A waiter in another process (a child that opens its own handle) is woken
 * by a release here; its exit status reports what it got. */
static void waiter_in_another_process_gets_the_released_seat(void) {
  char k[128]; /* key() names keys after the calling process: fix it before fork */
  snprintf(k, sizeof k, "%s", key("handoff"));
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(k, 2, &s), SHMSEM_OK);
  shmsem_permit* mine = NULL;
  shmsem_acquire_options two = SHMSEM_ACQUIRE_OPTIONS_INIT;
  two.n = 2;
  CHECK_RC(shmsem_acquire(s, &two, &mine), SHMSEM_OK);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    shmsem_sem* c = NULL;
    if (shmsem_open(k, 2, &c) != SHMSEM_OK) _exit(2);
    shmsem_permit* p = NULL;
    shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
    o.wait_timeout_ms = 20000;
    if (shmsem_acquire(c, &o, &p) != SHMSEM_OK) _exit(3);
    if (shmsem_release(p) != SHMSEM_OK) _exit(4);
    shmsem_close(c);
    _exit(0);
  }
  CHECK(await_waiters(s, 1));
  CHECK_RC(shmsem_release(mine), SHMSEM_OK);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK_RC(WEXITSTATUS(status), 0);
  CHECK_RC(shmsem_used(s), 0);
  shmsem_close(s);
  shmsem_remove(k);
}

/* A permit inherited across fork() belongs to the parent. */
static void inherited_permit_is_not_released_by_the_child(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("forkpermit"), 1, &s), SHMSEM_OK);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &p), SHMSEM_OK);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) _exit(shmsem_release(p) == SHMSEM_ENOTHELD ? 0 : 1);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_RC(shmsem_is_held(p), 1);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  shmsem_close(s);
  shmsem_remove(key("forkpermit"));
}

static void remove_if_unused_keeps_a_semaphore_in_use(void) {
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open(key("unused"), 1, &s), SHMSEM_OK);
  CHECK_RC(shmsem_remove_if_unused(key("unused")), 0);
  shmsem_close(s);
  CHECK_RC(shmsem_remove_if_unused(key("unused")), 1);
  CHECK_RC(shmsem_remove(key("unused")), 0);
  CHECK_RC(shmsem_remove(""), SHMSEM_EINVAL);
}

/* A segment another user created first (any user may create files in
 * /dev/shm): root refuses it unless it names that user on purpose. */
static void segment_of_an_untrusted_owner_is_refused(void) {
  if (geteuid() != 0) {
    printf("skip %s: needs root to create a segment as another user\n", current);
    return;
  }
  char squat[sizeof key_buf]; /* key() names keys by pid: the child's differs */
  snprintf(squat, sizeof squat, "%s", key("squat"));
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    /* nobody squats the key, with a capacity of its choosing. */
    shmsem_sem* mine = NULL;
    shmsem_open_options co = SHMSEM_OPEN_OPTIONS_INIT;
    co.mode = 0666;
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    _exit(shmsem_open_ex(squat, 100, &co, &mine) == SHMSEM_OK ? 0 : 11);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  shmsem_sem* s = (shmsem_sem*)1;
  CHECK_RC(shmsem_open(squat, 2, &s), SHMSEM_EUNTRUSTED);
  CHECK(s == NULL);
  CHECK(strstr(shmsem_last_error(), squat) != NULL);
  CHECK(strstr(shmsem_last_error(), "uid 65534") != NULL);
  CHECK(strstr(shmsem_last_error(), "trusted_owners") != NULL);
  shmsem_open_options oo = SHMSEM_OPEN_OPTIONS_INIT;
  oo.flags = SHMSEM_OPEN_NOCREATE;
  CHECK_RC(shmsem_open_ex(squat, 0, &oo, &s), SHMSEM_EUNTRUSTED);

  const char* const empty[] = {"", NULL};
  oo.trusted_owners = empty;
  CHECK_RC(shmsem_open_ex(squat, 0, &oo, &s), SHMSEM_EINVAL);
  const char* const unknown[] = {"some-user-not-on-this-host", "65534", NULL};
  oo.trusted_owners = unknown; /* a typo must not pass for "trust nobody" */
  CHECK_RC(shmsem_open_ex(squat, 0, &oo, &s), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "some-user-not-on-this-host") != NULL);
  const char* const owners[] = {"root", "65534", NULL};
  oo.trusted_owners = owners;
  CHECK_RC(shmsem_open_ex(squat, 0, &oo, &s), SHMSEM_OK);
  CHECK_RC(shmsem_capacity(s), 100); /* the squatter's capacity, accepted on purpose */
  shmsem_close(s);
  CHECK_RC(shmsem_remove(squat), 1);
}

struct test {
  const char* name;
  void (*fn)(void);
};

int main(int argc, char** argv) {
  const struct test tests[] = {
      {"codes_have_names", codes_have_names},
      {"bad_arguments_give_einval_and_a_message", bad_arguments_give_einval_and_a_message},
      {"last_error_is_per_thread_and_kept_until_the_next_failure",
       last_error_is_per_thread_and_kept_until_the_next_failure},
      {"last_error_of_another_thread_is_its_own", last_error_of_another_thread_is_its_own},
      {"acquire_try_acquire_and_figures", acquire_try_acquire_and_figures},
      {"permits_outlive_their_handle", permits_outlive_their_handle},
      {"second_release_is_refused_not_a_crash", second_release_is_refused_not_a_crash},
      {"use_after_close_is_refused_not_a_crash", use_after_close_is_refused_not_a_crash},
      {"ttl_extend_and_lost_seats", ttl_extend_and_lost_seats},
      {"open_options_default_ttl_and_nocreate", open_options_default_ttl_and_nocreate},
      {"force_release_all_reports_displaced_permits", force_release_all_reports_displaced_permits},
      {"set_capacity_grows_and_shrinks", set_capacity_grows_and_shrinks},
      {"cancel_token_ends_a_blocked_acquire", cancel_token_ends_a_blocked_acquire},
      {"async_acquire_of_a_free_seat_completes_at_once",
       async_acquire_of_a_free_seat_completes_at_once},
      {"async_acquire_waits_on_a_library_thread_until_granted",
       async_acquire_waits_on_a_library_thread_until_granted},
      {"cancelling_an_async_acquire_withdraws_it", cancelling_an_async_acquire_withdraws_it},
      {"close_ends_async_acquires_and_waits_for_their_callbacks",
       close_ends_async_acquires_and_waits_for_their_callbacks},
      {"two_hundred_async_acquires_wait_at_once", two_hundred_async_acquires_wait_at_once},
      {"forked_child_does_not_wait_for_its_parents_async_acquires",
       forked_child_does_not_wait_for_its_parents_async_acquires},
      {"shutdown_ends_acquires", shutdown_ends_acquires},
      {"wait_idle_reports_idle_or_timeout", wait_idle_reports_idle_or_timeout},
      {"log_lines_reach_the_handler", log_lines_reach_the_handler},
      {"seat_of_a_killed_holder_comes_back", seat_of_a_killed_holder_comes_back},
      {"waiter_in_another_process_gets_the_released_seat",
       waiter_in_another_process_gets_the_released_seat},
      {"inherited_permit_is_not_released_by_the_child",
       inherited_permit_is_not_released_by_the_child},
      {"remove_if_unused_keeps_a_semaphore_in_use", remove_if_unused_keeps_a_semaphore_in_use},
      {"segment_of_an_untrusted_owner_is_refused", segment_of_an_untrusted_owner_is_refused},
  };
  const size_t n = sizeof tests / sizeof tests[0];
  int ran = 0;
  for (size_t i = 0; i < n; ++i) {
    if (argc > 1 && strcmp(argv[1], tests[i].name) != 0) continue;
    current = tests[i].name;
    const int before = failures;
    tests[i].fn();
    printf("%s %s\n", failures == before ? "ok  " : "FAIL", tests[i].name);
    ++ran;
  }
  if (ran == 0) {
    fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "?");
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
