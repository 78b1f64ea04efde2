// tests/package/consumer/logging_consumer.cpp: <shmsem/logging.hpp> is the
// one public header that includes spdlog. This proves it compiles from the
// installed headers (libshmsem-dev depends on libspdlog-dev for it) and that
// the logger the library hands out is usable by the consumer's own spdlog.
#include <shmsem/logging.hpp>
#include <shmsem/version.hpp>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>

int main() {
  auto logger = shmsem::logger();
  if (!logger) {
    std::fprintf(stderr, "logging_consumer: FAILED: shmsem::logger() is null\n");
    return 1;
  }
  if (logger->name() != "shmsem") {
    std::fprintf(stderr, "logging_consumer: FAILED: logger is named '%s', not 'shmsem'\n",
                 logger->name().c_str());
    return 1;
  }
  auto mine = spdlog::stderr_logger_mt("consumer");
  shmsem::set_logger(mine);
  bool replaced = shmsem::logger() == mine;
  shmsem::set_logger(nullptr);
  if (!replaced || !shmsem::logger() || shmsem::logger() == mine) {
    std::fprintf(stderr,
                 "logging_consumer: FAILED: set_logger did not replace and restore the logger\n");
    return 1;
  }
  std::printf("logging_consumer: ok (shmsem %s, spdlog %d.%d.%d)\n", shmsem::runtime_version(),
              SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR, SPDLOG_VER_PATCH);
  return 0;
}
