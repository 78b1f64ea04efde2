// tests/package/consumer/two_process.cpp: what every consumer project
// builds. It uses shmsem only through the installed (or vendored) headers
// and library, and runs one semaphore across two processes:
//
//   parent: open(key, 1), acquire ............... child sees used == 1,
//                                                 try_acquire fails ("full")
//   parent: release ............................. child's blocked acquire wins
//   parent: sees the child as the holder, try_acquire fails, tells it to go
//   child:  release, exit 0;  parent: used == 0, remove(key)
//   parent: a bounded() call with a key template (fmt, in the public headers)
//
// The child is this program again (fork + exec of /proc/self/exe), so it
// maps the segment afresh like any unrelated process would. The processes
// talk over pipes, never by sleeping. Exit status 0 means every check held.
//
// usage: two_process KEY
//        two_process --remove KEY    (cleanup after a failed run)
//        two_process --path KEY      (prints the segments' paths)
//        two_process --hold KEY      (holds one of 2 seats, prints "held",
//                                     releases and removes KEY at EOF on stdin)
#include <shmsem/shmsem.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

namespace {

using namespace std::chrono_literals;

[[noreturn]] void fail(const char* who, const std::string& what) {
  std::fprintf(stderr, "two_process %s: FAILED: %s\n", who, what.c_str());
  std::_Exit(1);
}

void expect(bool ok, const char* who, const std::string& what) {
  if (!ok) fail(who, what);
}

void send(int fd, char c, const char* who) {
  expect(::write(fd, &c, 1) == 1, who, std::string("write to pipe: ") + std::strerror(errno));
}

char receive(int fd, const char* who) {
  char c = 0;
  ssize_t n;
  do {
    n = ::read(fd, &c, 1);
  } while (n < 0 && errno == EINTR);
  expect(n == 1, who, "the other process closed the pipe early");
  return c;
}

// The key bounded("<key>.bounded.{0}", ...)(21) uses.
std::string bounded_key(const std::string& key) {
  return key + ".bounded.21";
}

shmsem::AcquireOptions within(std::chrono::milliseconds budget) {
  shmsem::AcquireOptions o;
  o.wait_timeout = budget;
  return o;
}

int child(const std::string& key, int in, int out) {
  const char* who = "child";
  auto sem = shmsem::Semaphore::open(key, 1);
  expect(sem.capacity() == 1, who, "capacity is " + std::to_string(sem.capacity()));
  expect(sem.used() == 1, who,
         "the parent's seat is not visible: used = " + std::to_string(sem.used()));
  expect(!sem.try_acquire().has_value(), who, "try_acquire won a seat the parent holds");
  send(out, 'F', who);  // full, as it should be

  // The parent releases now; this acquire must be woken by that release.
  shmsem::Permit permit = sem.acquire(1, within(20s));
  expect(permit.is_held(), who, "acquired permit is not held");
  send(out, 'A', who);
  expect(receive(in, who) == 'R', who, "unexpected message from the parent");
  permit.release();
  return 0;
}

int parent(const std::string& key, const char* self) {
  const char* who = "parent";
  expect(std::string(shmsem::runtime_version()) == shmsem::kVersionString, who,
         std::string("compiled against ") + shmsem::kVersionString + " but loaded " +
             shmsem::runtime_version());
  shmsem::Semaphore::remove(key);  // a leftover of an earlier, killed run
  auto sem = shmsem::Semaphore::open(key, 1);
  shmsem::Permit permit = sem.acquire(1, within(5s));
  expect(sem.used() == 1, who, "used is " + std::to_string(sem.used()) + " after acquire");

  int to_child[2], from_child[2];
  expect(::pipe(to_child) == 0 && ::pipe(from_child) == 0, who, "pipe failed");
  pid_t pid = ::fork();
  expect(pid >= 0, who, "fork failed");
  if (pid == 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    std::string in = std::to_string(to_child[0]), out = std::to_string(from_child[1]);
    ::execl("/proc/self/exe", self, "--child", key.c_str(), in.c_str(), out.c_str(), nullptr);
    std::fprintf(stderr, "exec failed: %s\n", std::strerror(errno));
    std::_Exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);

  expect(receive(from_child[0], who) == 'F', who, "the child did not find the semaphore full");
  permit.release();
  expect(receive(from_child[0], who) == 'A', who, "the child did not acquire after the release");

  expect(sem.used() == 1, who, "used is " + std::to_string(sem.used()) + " while the child holds");
  expect(!sem.try_acquire().has_value(), who, "try_acquire won the seat the child holds");
  auto holders = sem.holders();
  expect(holders.size() == 1 && holders[0].pid == pid, who,
         "holders() does not show the child (" + std::to_string(pid) + ") as the one holder");

  send(to_child[1], 'R', who);
  int status = 0;
  expect(::waitpid(pid, &status, 0) == pid, who, "waitpid failed");
  expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, who, "the child failed");
  expect(sem.used() == 0, who,
         "used is " + std::to_string(sem.used()) + " after the child released");
  expect(shmsem::Semaphore::remove(key), who, "remove found no semaphore");

  // bounded() formats its key template with fmt in inline code: this is
  // what needs fmt in the consumer's compile and link flags.
  auto twice =
      shmsem::bounded({.key = key + ".bounded.{0}", .permits = 1}, [](int x) { return 2 * x; });
  std::optional<int> r = twice(21);
  expect(r && *r == 42, who, "bounded() did not run the body");
  shmsem::Semaphore::remove(bounded_key(key));
  std::printf("two_process: ok (shmsem %s, key %s, child %d)\n", shmsem::runtime_version(),
              key.c_str(), static_cast<int>(pid));
  return 0;
}

// A seat for the tools to show: held until stdin closes.
int hold(const std::string& key) {
  auto sem = shmsem::Semaphore::open(key, 2);
  shmsem::Permit permit = sem.acquire(1, within(5s));
  std::printf("held\n");
  std::fflush(stdout);
  while (std::getchar() != EOF) {
  }
  permit.release();
  shmsem::Semaphore::remove(key);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 5 && std::strcmp(argv[1], "--child") == 0)
      return child(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
    if (argc == 3 && std::strcmp(argv[1], "--remove") == 0) {
      shmsem::Semaphore::remove(argv[2]);
      shmsem::Semaphore::remove(bounded_key(argv[2]));
      return 0;
    }
    if (argc == 3 && std::strcmp(argv[1], "--path") == 0) {
      std::printf("%s\n%s\n", shmsem::Semaphore::segment_path(argv[2]).c_str(),
                  shmsem::Semaphore::segment_path(bounded_key(argv[2])).c_str());
      return 0;
    }
    if (argc == 3 && std::strcmp(argv[1], "--hold") == 0) return hold(argv[2]);
    if (argc == 2) return parent(argv[1], argv[0]);
    std::fprintf(stderr, "usage: %s KEY | --remove KEY | --path KEY | --hold KEY\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    fail(argc == 5 ? "child" : "parent", std::string("exception: ") + e.what());
  }
}
