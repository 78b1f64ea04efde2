/* c_redis_test.c: the C ABI on a Redis key, against a private redis-server
 * (Debian's) that this test starts on a unix socket in a temporary folder.
 * A child process on another (faked) host holds the seats and is
 * SIGKILLed; the parent gets them back once the child's session lapses.
 * Processes are synchronised with pipes; the only polling is the wait for
 * the server to accept connections.
 *
 * Usage: shmsem-c-redis-test
 */
#define _POSIX_C_SOURCE 200809L

#include <shmsem/shmsem.h>

#include "c_test.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static char sock_path[128];
static pid_t server = -1;

static void url(char* out, size_t size, const char* name) {
  snprintf(out, size, "redis+unix://%s?key=ctest.redis.%ld.%s", sock_path, (long)getpid(), name);
}

static int accepts(void) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  const size_t len = strlen(sock_path);
  if (len >= sizeof a.sun_path) return 0;
  memcpy(a.sun_path, sock_path, len);
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  const int ok = connect(fd, (const struct sockaddr*)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* Starts redis-server; 0 on success. */
static int start_server(void) {
  strcpy(dir, "/tmp/shmsem-c-redis.XXXXXX");
  if (!mkdtemp(dir)) return -1;
  snprintf(sock_path, sizeof sock_path, "%s/redis.sock", dir);
  char log[128];
  snprintf(log, sizeof log, "%s/redis.log", dir);
  server = fork();
  if (server < 0) return -1;
  if (server == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* dies with the test */
    char* argv[] = {"redis-server", "--port",           "0",   "--dir",  dir, "--unixsocket",
                    sock_path,      "--unixsocketperm", "700", "--save", "",  "--appendonly",
                    "no",           "--logfile",        log,   NULL};
    execvp("redis-server", argv);
    _exit(127);
  }
  const double until = now_ms() + 20000;
  while (now_ms() < until) {
    int st;
    if (waitpid(server, &st, WNOHANG) == server) {
      server = -1;
      return -1;
    }
    if (accepts()) return 0;
    const struct timespec tick = {0, 5000000};
    nanosleep(&tick, NULL);
  }
  return -1;
}

static void stop_server(void) {
  if (server > 0) {
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
  }
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (dir[0] && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static shmsem_open_options quick_sessions(void) {
  shmsem_open_options o = SHMSEM_OPEN_OPTIONS_INIT;
  o.session_timeout_ms = 1000;
  return o;
}

/* Open, acquire, try, release, fencing tokens, holders with their host,
 * remove: every call works on a URL. */
static void a_url_key_works_like_a_shared_memory_key(void) {
  current = "a_url_key_works_like_a_shared_memory_key";
  char k[256];
  url(k, sizeof k, "basic");
  setenv("SHMSEM_HOST", "c-host-a", 1);
  shmsem_open_options oo = quick_sessions();
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open_ex(k, 2, &oo, &s), SHMSEM_OK);
  CHECK(strcmp(shmsem_key(s), k) == 0);
  CHECK_RC(shmsem_capacity(s), 2);
  CHECK_RC(shmsem_capabilities(s), SHMSEM_CAP_FENCING); /* a server: reads do I/O */

  shmsem_permit* p1 = NULL;
  shmsem_permit* p2 = NULL;
  shmsem_permit* p3 = NULL;
  CHECK_RC(shmsem_acquire(s, NULL, &p1), SHMSEM_OK);
  CHECK_RC(shmsem_try_acquire(s, 1, &p2), SHMSEM_OK);
  const uint64_t t1 = shmsem_permit_fencing_token(p1);
  const uint64_t t2 = shmsem_permit_fencing_token(p2);
  CHECK(t1 > 0);
  CHECK(t2 > t1);
  CHECK_RC(shmsem_used(s), 2);
  CHECK_RC(shmsem_try_acquire(s, 1, &p3), SHMSEM_EUNAVAILABLE);
  CHECK(p3 == NULL);

  shmsem_holder hs[4];
  CHECK_RC(shmsem_holders(s, hs, 4, sizeof hs[0]), 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(hs[i].pid == (int32_t)getpid());
    CHECK(strcmp(hs[i].host, "c-host-a") == 0);
    CHECK(hs[i].state == SHMSEM_HOLDER_ALIVE);
  }
  CHECK(shmsem_is_held(p1) == 1);

  CHECK_RC(shmsem_release(p1), SHMSEM_OK);
  shmsem_acquire_options ao = SHMSEM_ACQUIRE_OPTIONS_INIT;
  ao.wait_timeout_ms = 0;
  CHECK_RC(shmsem_acquire(s, &ao, &p3), SHMSEM_OK);
  CHECK(shmsem_permit_fencing_token(p3) > t2);
  CHECK_RC(shmsem_release(p2), SHMSEM_OK);
  CHECK_RC(shmsem_release(p3), SHMSEM_OK);
  CHECK_RC(shmsem_used(s), 0);
  CHECK(shmsem_permit_fencing_token(NULL) == 0);
  shmsem_close(s);
  CHECK_RC(shmsem_remove(k), 1);
  oo.flags = SHMSEM_OPEN_NOCREATE;
  CHECK_RC(shmsem_open_ex(k, 0, &oo, &s), SHMSEM_ENOENT);
}

/* The callback of an asynchronous acquire: sends what it got down a pipe. */
struct async_result {
  int status;
  shmsem_permit* permit;
};
static int async_pipe[2] = {-1, -1};

static void send_async(int status, shmsem_permit* permit, void* ctx) {
  (void)ctx;
  const struct async_result r = {status, permit};
  if (write(async_pipe[1], &r, sizeof r) != (ssize_t)sizeof r) abort();
}

/* Reads one callback's result, waiting up to 10 s; 0 if none came. */
static int receive_async(struct async_result* r) {
  struct pollfd p = {async_pipe[0], POLLIN, 0};
  if (poll(&p, 1, 10000) != 1) return 0;
  return read(async_pipe[0], r, sizeof *r) == (ssize_t)sizeof *r;
}

/* On Redis even a free seat is taken on the library's thread: the caller
 * (an event loop) never waits for a round trip. */
static void an_async_acquire_on_redis_never_waits_for_the_network(void) {
  current = "an_async_acquire_on_redis_never_waits_for_the_network";
  char k[256];
  url(k, sizeof k, "async");
  CHECK(pipe(async_pipe) == 0);
  shmsem_open_options oo = quick_sessions();
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open_ex(k, 1, &oo, &s), SHMSEM_OK);
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire_async(s, NULL, NULL, send_async, NULL, &p), SHMSEM_EINPROGRESS);
  CHECK(p == NULL);
  struct async_result got;
  CHECK(receive_async(&got));
  CHECK_RC(got.status, SHMSEM_OK);
  CHECK(shmsem_permit_fencing_token(got.permit) > 0);
  CHECK_RC(shmsem_used(s), 1);
  /* A second one waits in Redis's queue until the first is released. */
  CHECK_RC(shmsem_acquire_async(s, NULL, NULL, send_async, NULL, &p), SHMSEM_EINPROGRESS);
  const double deadline = now_ms() + 10000;
  while (shmsem_waiters(s) != 1 && now_ms() < deadline) {
    const struct timespec nap = {0, 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  CHECK_RC(shmsem_waiters(s), 1);
  CHECK_RC(shmsem_release(got.permit), SHMSEM_OK);
  CHECK(receive_async(&got));
  CHECK_RC(got.status, SHMSEM_OK);
  CHECK_RC(shmsem_release(got.permit), SHMSEM_OK);
  /* Without waiting, it answers on the caller's thread. */
  shmsem_acquire_options ao = SHMSEM_ACQUIRE_OPTIONS_INIT;
  ao.wait_timeout_ms = 0;
  CHECK_RC(shmsem_acquire_async(s, &ao, NULL, send_async, NULL, &p), SHMSEM_OK);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  shmsem_close(s);
  CHECK_RC(shmsem_remove(k), 1);
  close(async_pipe[0]);
  close(async_pipe[1]);
}

/* A holder in another process on another host is SIGKILLed: its seats
 * come back to a blocked waiter once its session lapses. */
static void a_killed_holders_seats_come_back(void) {
  current = "a_killed_holders_seats_come_back";
  char k[256];
  url(k, sizeof k, "killed");
  int ready[2];
  CHECK(pipe(ready) == 0);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    close(ready[0]);
    setenv("SHMSEM_HOST", "c-host-b", 1);
    shmsem_open_options oo = quick_sessions();
    shmsem_sem* s = NULL;
    shmsem_permit* p = NULL;
    shmsem_acquire_options ao = SHMSEM_ACQUIRE_OPTIONS_INIT;
    ao.n = 2;
    if (shmsem_open_ex(k, 2, &oo, &s) != SHMSEM_OK || shmsem_acquire(s, &ao, &p) != SHMSEM_OK) {
      fprintf(stderr, "%s: the holder could not take its seats: %s\n", current,
              shmsem_last_error());
      _exit(1);
    }
    if (write(ready[1], "h", 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  const ssize_t got = read(ready[0], &c, 1);
  close(ready[0]);
  if (got != 1) {
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
  }
  CHECK(got == 1);

  shmsem_open_options oo = quick_sessions();
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open_ex(k, 2, &oo, &s), SHMSEM_OK);
  shmsem_holder h;
  CHECK_RC(shmsem_holders(s, &h, 1, sizeof h), 1);
  CHECK(h.pid == (int32_t)child);
  CHECK(strcmp(h.host, "c-host-b") == 0);
  CHECK(h.weight == 2);

  CHECK(kill(child, SIGKILL) == 0);
  CHECK(waitpid(child, NULL, 0) == child);
  const double t0 = now_ms();
  shmsem_acquire_options ao = SHMSEM_ACQUIRE_OPTIONS_INIT;
  ao.n = 2;
  ao.wait_timeout_ms = 30000;  // the session is 1 s; the bound is for a loaded machine
  shmsem_permit* p = NULL;
  CHECK_RC(shmsem_acquire(s, &ao, &p), SHMSEM_OK);
  fprintf(stderr, "%s: seats back after %.0f ms\n", current, now_ms() - t0);
  CHECK(shmsem_permit_fencing_token(p) > 0);
  CHECK_RC(shmsem_release(p), SHMSEM_OK);
  shmsem_close(s);
  CHECK_RC(shmsem_remove(k), 1);
}

/* Bad URLs and an unreachable server give a code and a message naming the
 * URL, without hanging. */
static void bad_and_unreachable_urls_fail_clearly(void) {
  current = "bad_and_unreachable_urls_fail_clearly";
  shmsem_sem* s = NULL;
  CHECK_RC(shmsem_open("redis://", 1, &s), SHMSEM_EINVAL);
  CHECK(strstr(shmsem_last_error(), "redis://") != NULL);
  CHECK_RC(shmsem_open("redis+unix:///no/such/dir/redis.sock", 1, &s), SHMSEM_EINVAL);
  char k[256];
  snprintf(k, sizeof k, "redis+unix://%s/absent.sock?key=x", dir);
  shmsem_open_options oo = SHMSEM_OPEN_OPTIONS_INIT;
  oo.connect_timeout_ms = 200;
  const double t0 = now_ms();
  CHECK_RC(shmsem_open_ex(k, 1, &oo, &s), SHMSEM_ESEGMENT);
  CHECK(strstr(shmsem_last_error(), "absent.sock") != NULL);
  CHECK(now_ms() - t0 < 20000);
  CHECK(s == NULL);
}

int main(void) {
  if (start_server() != 0) {
    fprintf(stderr, "redis-server did not start (is Debian's redis-server installed?)\n");
    stop_server();
    return 1;
  }
  /* First, so that the child forks from a process that has not used the
   * library yet. */
  a_killed_holders_seats_come_back();
  a_url_key_works_like_a_shared_memory_key();
  an_async_acquire_on_redis_never_waits_for_the_network();
  bad_and_unreachable_urls_fail_clearly();
  stop_server();
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("all C ABI Redis tests passed\n");
  return 0;
}
