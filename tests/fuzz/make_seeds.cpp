// make_seeds.cpp: writes the segment fuzzer's seed corpus from real
// segments. Each seed is the first page of a segment caught in one state
// (fresh, held, queued waiters, a killed holder, grown, shrunk, ...),
// framed the way segment_fuzz.cpp reads its input: a flags byte, a 4-byte
// file size selector, then the page. Run it after every layout change, from
// a build tree that has it (the default test folders leave fuzz out):
//
//   cmake -S . -B build-seeds -DSHMSEM_TEST_DIRS=fuzz
//   cmake --build build-seeds --target segment-fuzz-seeds
//   build-seeds/tests/fuzz/segment-fuzz-seeds tests/fuzz/corpus/segment_fuzz
//
// It replaces the seeds named v<layout>-*.seed and leaves the others.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "shm/layout.hpp"

namespace layout = shmsem::detail::layout;
using namespace std::chrono_literals;

namespace {

std::string out_dir;
int written = 0;

// The first page of the segment of `key`, as it is now.
std::vector<char> first_page(const std::string& key) {
  std::vector<char> page(layout::kHeaderRegion, 0);
  const int fd = ::open(shmsem::Semaphore::segment_path(key).c_str(), O_RDONLY);
  if (fd < 0 || ::pread(fd, page.data(), page.size(), 0) != static_cast<ssize_t>(page.size())) {
    std::perror(key.c_str());
    std::exit(1);
  }
  ::close(fd);
  return page;
}

// One seed per size mode (see segment_fuzz.cpp): sizes around the header,
// around what the lease table needs, or anything.
void write_seeds(const std::string& name, const std::string& key) {
  const std::vector<char> page = first_page(key);
  for (unsigned mode = 0; mode < 3; ++mode) {
    const unsigned char flags = static_cast<unsigned char>(0x0f | (mode << 4));
    const std::uint32_t sel = mode == 1 ? 64 : 0x9e3779b9u * (written + 1);
    const std::string path = out_dir + "/v" + std::to_string(layout::kLayoutVersion) + "-" + name +
                             "-m" + std::to_string(mode) + ".seed";
    std::ofstream out(path, std::ios::binary);
    out.put(static_cast<char>(flags));
    out.write(reinterpret_cast<const char*>(&sel), sizeof sel);
    out.write(page.data(), static_cast<std::streamsize>(page.size()));
    ++written;
  }
}

// A child that opens `key`, acquires `n` seats (with `ttl`), says so on
// `ready` and holds them until killed.
pid_t holder(const std::string& key, int n, std::chrono::milliseconds ttl = 0ms) {
  int fds[2];
  if (::pipe(fds) != 0) std::exit(1);
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto s = shmsem::Semaphore::attach(key);
    auto p = s.acquire(n, {.ttl = ttl});
    (void)!::write(fds[1], "h", 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  (void)!::read(fds[0], &c, 1);
  ::close(fds[0]);
  ::close(fds[1]);
  return pid;
}

void kill_and_wait(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// Runs `make` on a fresh semaphore of `capacity`, then writes its seeds.
void state(const std::string& name, int capacity,
           const std::function<void(shmsem::Semaphore&, const std::string&)>& make,
           const shmsem::Options& options = {}) {
  const std::string key = "fuzz.seed." + std::to_string(::getpid()) + "." + name;
  shmsem::Semaphore::remove(key);
  {
    auto s = shmsem::Semaphore::open(key, capacity, options);
    make(s, key);
    write_seeds(name, key);
  }
  shmsem::Semaphore::remove(key);
}

// Another process holds all `capacity` seats while `n` threads here wait;
// the seeds `name` are written then.
void full_with_waiters(shmsem::Semaphore& s, const std::string& key, int capacity, int n,
                       const std::string& name) {
  const pid_t h = holder(key, capacity);
  std::vector<std::thread> waiters;
  for (int i = 0; i < n; ++i)
    waiters.emplace_back([&] {
      try {
        s.acquire(1, {.wait_timeout = 500ms});
      } catch (const shmsem::AcquisitionError&) {
      }
    });
  while (s.waiters() < n) std::this_thread::yield();
  write_seeds(name, key);
  for (auto& t : waiters) t.join();
  kill_and_wait(h);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  const std::string prefix = "v" + std::to_string(layout::kLayoutVersion) + "-";
  for (const auto& e : std::filesystem::directory_iterator(out_dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path());

  auto nothing = [](shmsem::Semaphore&, const std::string&) {};
  state("cap1-fresh", 1, nothing);
  state("cap4-fresh", 4, nothing);
  state("cap5000-fresh", 5000, nothing);
  state("cap4-held", 4, [](shmsem::Semaphore& s, const std::string&) {
    auto p = s.acquire();
    p.release();
    static auto kept = s.acquire();  // held when the page is read
  });
  state("cap4-full-3waiters", 4, [](shmsem::Semaphore& s, const std::string& key) {
    full_with_waiters(s, key, 4, 3, "cap4-full-3waiters-live");
  });
  // Barging: the queue sets `waiting` instead of `queued`.
  state("cap2-barging-full-2waiters", 2,
        [](shmsem::Semaphore& s, const std::string& key) {
          full_with_waiters(s, key, 2, 2, "cap2-barging-full-2waiters-live");
        },
        {.fairness = shmsem::Fairness::barging});
  state("cap100-20procs-held", 100, [](shmsem::Semaphore&, const std::string& key) {
    std::vector<pid_t> held;
    for (int i = 0; i < 20; ++i) held.push_back(holder(key, 1));
    write_seeds("cap100-20procs-held-live", key);
    for (pid_t p : held) kill_and_wait(p);
  });
  state("cap100-40threads-released", 100, [](shmsem::Semaphore& s, const std::string&) {
    std::vector<std::thread> ts;
    for (int i = 0; i < 40; ++i)
      ts.emplace_back([&] {
        for (int r = 0; r < 50; ++r) s.acquire().release();
      });
    for (auto& t : ts) t.join();
  });
  state("cap100-50held-ttl", 100, [](shmsem::Semaphore&, const std::string& key) {
    std::vector<pid_t> held;
    for (int i = 0; i < 5; ++i) held.push_back(holder(key, 10, 60s));
    write_seeds("cap100-50held-ttl-live", key);
    for (pid_t p : held) kill_and_wait(p);
  });
  state("cap100-expired-unreaped", 100, [](shmsem::Semaphore&, const std::string& key) {
    const pid_t h = holder(key, 3, 1ms);
    std::this_thread::sleep_for(20ms);  // past its TTL; nobody reaps yet
    write_seeds("cap100-expired-unreaped-live", key);
    kill_and_wait(h);
  });
  state("cap4-killed-holder-unreaped", 4,
        [](shmsem::Semaphore&, const std::string& key) { kill_and_wait(holder(key, 2)); });
  state("cap4-killed-holder-reaped", 4, [](shmsem::Semaphore& s, const std::string& key) {
    kill_and_wait(holder(key, 2));
    s.reap();
  });
  state("cap4-grown5000", 4,
        [](shmsem::Semaphore& s, const std::string&) { s.set_capacity(5000); });
  state("cap5000-shrunk4-overheld", 5000, [](shmsem::Semaphore& s, const std::string&) {
    static auto kept = s.acquire(10);
    s.set_capacity(4);
  });
  state("cap100-force-released", 100, [](shmsem::Semaphore& s, const std::string& key) {
    const pid_t h = holder(key, 5);
    s.force_release_all();
    kill_and_wait(h);
  });
  std::printf("wrote %d seeds to %s\n", written, out_dir.c_str());
  return 0;
}
