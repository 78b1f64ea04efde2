// sweep_token_files: removes the token files of semaphores that are gone
// (Semaphore::remove_orphaned_token_files), printing each; run by ctest
// after the tests (tests/CMakeLists.txt).
#include <shmsem/shmsem.hpp>

#include <cstdio>
#include <exception>

int main() {
  try {
    for (const auto& path : shmsem::Semaphore::remove_orphaned_token_files())
      std::printf("removed %s\n", path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sweep_token_files: %s\n", e.what());
    return 1;
  }
}
