// fault_helper.cpp: a tiny program the fault tests run where a forked child
// will not do (inside `unshare --pid --fork`).
//   fault_helper hold KEY N   attach, take N seats, print "held", wait for a
//                             line on stdin, release, print "released"
//   fault_helper reap KEY     attach, reap(), print "freed=F used=U held=H
//                             foreign=X alive=A"
#include <shmsem/shmsem.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fault_helper hold KEY N | reap KEY\n");
    return 2;
  }
  try {
    shmsem::Semaphore sem = shmsem::Semaphore::attach(argv[2]);
    if (std::strcmp(argv[1], "hold") == 0 && argc >= 4) {
      shmsem::Permit p = sem.acquire(std::atoi(argv[3]));
      std::printf("held\n");
      std::fflush(stdout);
      char line[64];
      if (!std::fgets(line, sizeof line, stdin)) return 0;
      p.release();
      std::printf("released\n");
      return 0;
    }
    if (std::strcmp(argv[1], "reap") == 0) {
      const int freed = sem.reap();
      int foreign = 0, alive = 0;
      const auto holders = sem.holders();
      for (const auto& h : holders) {
        foreign += h.foreign_namespace;
        alive += h.state == shmsem::HolderState::alive;
      }
      std::printf("freed=%d used=%d held=%zu foreign=%d alive=%d\n", freed, sem.used(),
                  holders.size(), foreign, alive);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_helper: %s\n", e.what());
    return 1;
  }
  return 2;
}
