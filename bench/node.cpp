// bench/node.cpp: the Node rows. The npm package shmsem (bindings/node) and
// its Node peers run in one node process, bench/node/node-rows.js, which
// prints its figures as one JSON line; this case runs it against a private
// redis-server (for redis-semaphore) and keeps the figures as counters.
//
//   BM_Node/rows   awaited acquire+release and tryAcquire+release beside
//                  async-sema's Sema; cross-process wake latency beside
//                  redis-semaphore's; reclaim after SIGKILL of a holder
//
// Without the addon in this build, without node, or without bench/node's
// node_modules, the case records why (node_status) and the report says so.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "harness.hpp"
#include "redis_server.hpp"

namespace shmsem_bench {
namespace {

using benchmark::State;

// Why there are no figures; the report's words for each are in report.cpp.
enum node_status {
  measured = 0,
  no_node = 1,
  peers_missing = 2,
  failed = 3,
  not_built = 4,
  no_redis = 5
};

#ifdef SHMSEM_BENCH_NODE_ADDON
// The number after "name": in a JSON line, if there is one.
std::optional<double> json_number(const std::string& line, const std::string& name) {
  const auto at = line.find("\"" + name + "\":");
  if (at == std::string::npos) return std::nullopt;
  return std::strtod(line.c_str() + at + name.size() + 3, nullptr);
}
#endif

void BM_NodeRows(State& state) {
#ifndef SHMSEM_BENCH_NODE_ADDON
  for (auto _ : state) state.counters["node_status"] = not_built;
#else
  for (auto _ : state) {
    std::unique_ptr<shmsem::test::redis_server> redis;
    try {
      redis = std::make_unique<shmsem::test::redis_server>();
    } catch (const std::exception&) {
      state.counters["node_status"] = no_redis;
      continue;
    }
    std::string cmd = "SHMSEM_NODE_ADDON='" SHMSEM_BENCH_NODE_ADDON "' node '" SHMSEM_BENCH_NODE_DIR
                      "/node-rows.js' --lib '" SHMSEM_BENCH_NODE_LIB "' --socket '" +
                      redis->socket_path() + "'" + (config().smoke ? " --smoke" : "");
#ifdef SHMSEM_CLI_BIN
    cmd += " --cli '" SHMSEM_CLI_BIN "'";
#endif
    FILE* f = ::popen(cmd.c_str(), "r");
    std::string out;
    int code = -1;
    if (f) {
      char buf[1024];
      while (std::fgets(buf, sizeof buf, f)) out += buf;
      const int rc = ::pclose(f);
      code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    }
    if (code == 127)
      state.counters["node_status"] = no_node;  // the shell found no node
    else if (code == 2)
      state.counters["node_status"] = peers_missing;
    else if (code == 4)
      state.counters["node_status"] = not_built;
    else if (code != 0 || !json_number(out, "shmsem_pair_ns"))
      state.counters["node_status"] = failed;
    else {
      state.counters["node_status"] = measured;
      for (const char* name :
           {"shmsem_pair_ns", "shmsem_try_ns", "sema_pair_ns", "shmsem_wake_p50_ns",
            "shmsem_wake_p99_ns", "redis_wake_p50_ns", "redis_wake_p99_ns", "wake_trials",
            "reclaim_median_ns", "reclaim_max_ns", "child_exit_median_ns", "cli_reclaim_median_ns",
            "cli_reclaim_max_ns", "cli_exit_median_ns"})
        if (auto v = json_number(out, name)) state.counters[name] = *v;
    }
  }
#endif
}

}  // namespace

void register_node() {
  register_process("BM_Node/rows", BM_NodeRows);
}

}  // namespace shmsem_bench
