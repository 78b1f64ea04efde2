// shmsem-demo: six worker processes share two seats. One holder is killed
// with SIGKILL while it holds a seat; the fleet reclaims the seat and the
// next waiter gets it. Prints a timeline.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <shmsem/shmsem.hpp>

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

const clock_type::time_point start = clock_type::now();

void say(const char* who, const std::string& what) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start).count();
  std::string line = "[" + std::to_string(ms) + " ms] " + std::string(who) + " " + what + "\n";
  // One write per line, so lines from different processes never interleave.
  (void)!::write(STDOUT_FILENO, line.data(), line.size());
}

int worker(const std::string& key, int id, int victim_pipe) {
  const std::string who =
      "worker " + std::to_string(id) + " (pid " + std::to_string(::getpid()) + ")";
  auto sem = shmsem::Semaphore::open(key, 2);
  for (int job = 0; job < 2; ++job) {
    say(who.c_str(), "waits for a seat");
    shmsem::Permit seat = sem.acquire(1, {.wait_timeout = 30s});
    say(who.c_str(), "got a seat   (seats used " + std::to_string(sem.used()) + "/" +
                         std::to_string(sem.capacity()) + ")");
    if (id == 1) {
      // The victim tells the supervisor it holds a seat, then works forever.
      (void)!::write(victim_pipe, "x", 1);
      ::pause();
    }
    std::this_thread::sleep_for(150ms);  // the "work"
    seat.release();
    say(who.c_str(), "released its seat");
  }
  return 0;
}

}  // namespace

int main() {
  const std::string key = "demo." + std::to_string(::getpid());
  shmsem::Semaphore::remove(key);
  auto sem = shmsem::Semaphore::open(key, 2);
  std::printf("shmsem demo: 6 worker processes share %d seats of semaphore '%s'\n", sem.capacity(),
              key.c_str());
  std::printf("segment: %s\n\n", shmsem::Semaphore::segment_path(key).c_str());
  std::fflush(stdout);

  int victim[2];
  if (::pipe(victim) != 0) return 1;
  std::vector<pid_t> workers;
  for (int id = 1; id <= 6; ++id) {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(worker(key, id, victim[1]));
    workers.push_back(pid);
  }

  char c;
  if (::read(victim[0], &c, 1) != 1) return 1;
  say("supervisor",
      "kill -9 worker 1 (pid " + std::to_string(workers[0]) + ") while it holds a seat");
  const auto killed = clock_type::now();
  ::kill(workers[0], SIGKILL);
  ::waitpid(workers[0], nullptr, 0);

  // Watch the fleet reclaim the seat: a blocked waiter notices the death.
  while (sem.stats().reaped == 0 && clock_type::now() - killed < 10s)
    std::this_thread::sleep_for(1ms);
  const auto took =
      std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - killed);
  std::ostringstream after;
  after << std::fixed << std::setprecision(1) << static_cast<double>(took.count()) / 1000.0;
  say("supervisor", "the dead worker's seat was reclaimed " + after.str() + " ms after the kill");

  int failures = 0;
  for (std::size_t i = 1; i < workers.size(); ++i) {
    int status = 0;
    ::waitpid(workers[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  const auto st = sem.stats();
  std::printf(
      "\nDone. acquired=%llu released=%llu reaped=%llu (dead holders) seats in use now=%d\n",
      static_cast<unsigned long long>(st.acquired), static_cast<unsigned long long>(st.released),
      static_cast<unsigned long long>(st.reaped), sem.used());
  std::printf("Never more than %d workers held a seat at once; the killed worker leaked nothing.\n",
              sem.capacity());
  shmsem::Semaphore::remove(key);
  return failures == 0 && st.reaped == 1 && sem.used() == 0 ? 0 : 1;
}
