/* tests/package/consumer/two_process.c: the C consumer, built with
 *   cc -std=c11 two_process.c $(pkg-config --cflags --libs shmsem)
 * It runs one semaphore across two processes through <shmsem/shmsem.h>:
 *
 *   parent: open(key, 1), acquire .......... child: used == 1, try_acquire
 *                                            is SHMSEM_EUNAVAILABLE
 *   parent: release ........................ child's blocked acquire wins
 *   child:  release, exit 0;  parent: used == 0, remove(key)
 *
 * The processes talk over pipes, never by sleeping. Exit status 0 means
 * every check held.
 *
 * usage: two_process_c KEY
 */
#define _POSIX_C_SOURCE 200809L

#include <shmsem/shmsem.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void expect(int ok, const char* who, const char* what) {
  if (!ok) {
    fprintf(stderr, "two_process_c %s: FAILED: %s (%s)\n", who, what, shmsem_last_error());
    _exit(1);
  }
}

static char receive(int fd) {
  char c = 0;
  ssize_t n;
  do n = read(fd, &c, 1);
  while (n < 0 && errno == EINTR);
  return n == 1 ? c : 0;
}

static void send_byte(int fd, char c) {
  expect(write(fd, &c, 1) == 1, "pipe", "write");
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s KEY\n", argv[0]);
    return 2;
  }
  const char* key = argv[1];
  int to_child[2], to_parent[2];
  expect(pipe(to_child) == 0 && pipe(to_parent) == 0, "parent", "pipe");
  shmsem_sem* s = NULL;
  shmsem_permit* p = NULL;
  expect(shmsem_open(key, 1, &s) == SHMSEM_OK, "parent", "open");
  expect(shmsem_acquire(s, NULL, &p) == SHMSEM_OK, "parent", "acquire");
  const pid_t pid = fork();
  expect(pid >= 0, "parent", "fork");
  if (pid == 0) {
    shmsem_sem* c = NULL;
    shmsem_permit* q = NULL;
    expect(shmsem_open(key, 1, &c) == SHMSEM_OK, "child", "open");
    expect(shmsem_used(c) == 1, "child", "the parent's seat is not visible");
    expect(shmsem_try_acquire(c, 1, &q) == SHMSEM_EUNAVAILABLE, "child", "try_acquire won");
    send_byte(to_parent[1], 'F');
    expect(receive(to_child[0]) == 'R', "child", "no word from the parent");
    shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
    o.wait_timeout_ms = 30000;
    expect(shmsem_acquire(c, &o, &q) == SHMSEM_OK, "child", "acquire after the release");
    expect(shmsem_release(q) == SHMSEM_OK, "child", "release");
    shmsem_close(c);
    _exit(0);
  }
  expect(receive(to_parent[0]) == 'F', "parent", "the child did not find the semaphore full");
  expect(shmsem_release(p) == SHMSEM_OK, "parent", "release");
  send_byte(to_child[1], 'R');
  int status = 0;
  expect(waitpid(pid, &status, 0) == pid, "parent", "waitpid");
  expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "parent", "the child failed");
  expect(shmsem_used(s) == 0, "parent", "a seat is still used");
  shmsem_close(s);
  expect(shmsem_remove(key) == 1, "parent", "remove");
  printf("two_process_c: ok (libshmsem %s)\n", shmsem_version());
  return 0;
}
