// bench/report.hpp: turns the runs of one benchmark session into the ratio
// table of docs/performance.md: every case in a row, shmsem and each peer in
// columns, the ratio to a POSIX sem_t, and the targets checked
// against the same run.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace shmsem_bench {

/// One case's figures: time per iteration (ns) and the counters.
struct Result {
  double real_ns = 0;
  /// CPU time of the process per iteration: what the tables show for the
  /// single-thread cases, because a busy neighbour that preempts the
  /// benchmark inflates real time but not CPU time.
  double cpu_ns = 0;
  std::map<std::string, double> counters;
  bool error = false;
  std::string error_message;
};

/// Results by benchmark name ("BM_AcquireRelease/shmsem"). For repeated
/// cases this is the median of the repetitions.
using Results = std::map<std::string, Result>;

/// The console reporter, which also keeps every result for the table.
class CollectingReporter final : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override;
  /// Medians where there were repetitions, else the single run.
  Results results() const;
  /// Names and messages of the cases that failed.
  std::vector<std::string> errors() const;

 private:
  Results single_;
  Results median_;
};

/// The 1, 5 and 15 minute load averages, as /proc/loadavg gives them.
std::string load_average();

/// The markdown report: the machine, the results table and the targets table.
/// `load_at_start` is load_average() before the first case ran.
std::string render_report(const Results& results, bool smoke, const std::string& load_at_start);

}  // namespace shmsem_bench
