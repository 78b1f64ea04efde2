// signal_counter.cpp: a COMMAND for the `shmsem run` signal tests. It
// counts every delivery of SIGTERM on its own: its handler prints
// "TERM <n>" and then stays in the handler for 50 ms, during which a second
// SIGTERM waits (blocked) and is delivered after, instead of merging with
// the first. So two SIGTERMs sent a few milliseconds apart count as two.
// Usage: signal_counter STOPFILE. Prints "ready"; once STOPFILE exists,
// prints "total <n>" and exits 0.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace {

volatile sig_atomic_t g_count = 0;

void on_term(int) {
  const int n = g_count + 1;
  g_count = n;
  char line[32] = "TERM ";
  std::size_t len = std::strlen(line);
  char digits[16];
  std::size_t d = 0;
  int v = n;
  do digits[d++] = static_cast<char>('0' + v % 10);
  while ((v /= 10) > 0);
  while (d > 0) line[len++] = digits[--d];
  line[len++] = '\n';
  ssize_t ignored = ::write(STDOUT_FILENO, line, len);
  (void)ignored;
  timespec pause{0, 50'000'000};
  ::nanosleep(&pause, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: signal_counter STOPFILE\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  std::printf("ready\n");
  std::fflush(stdout);
  while (::access(argv[1], F_OK) != 0) {
    timespec tick{0, 20'000'000};
    ::nanosleep(&tick, nullptr);
  }
  std::printf("total %d\n", static_cast<int>(g_count));
  return 0;
}
