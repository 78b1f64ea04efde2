// semtop/main.cpp: options, the batch modes (--once, -n, --json,
// --prometheus) and the interactive main loop: one getch() with a short
// timeout, a refresh every interval, and key results turned into actions.
#include "model.hpp"
#include "report.hpp"
#include "terminal.hpp"
#include "view.hpp"

#include <shmsem/logging.hpp>
#include <shmsem/metrics.hpp>
#include <shmsem/semaphore.hpp>
#include <shmsem/version.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <CLI/CLI.hpp>

// After spdlog: curses.h defines macros (move, erase, timeout...) that
// could break other headers.
#include <curses.h>

#include <cmath>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace {

struct settings {
  double interval_s = 1.0;
  int iterations = 0;  // 0: interactive (or one, for --json/--prometheus)
  bool once = false;
  bool json = false;
  bool prometheus = false;
  bool readonly = false;
  bool no_color = false;
  std::string filter;
  std::string sort = "key";
  shmsem::Options trust;           // trusted_owners from --trust-owner
  std::vector<std::string> redis;  // Redis servers whose semaphores are shown too
  bool no_local = false;           // only theirs
};

// This host's semaphores and every --redis server's, as asked.
std::vector<semtop::sample> sample(const settings& s) {
  std::vector<semtop::sample> all;
  if (!s.no_local) all = semtop::sample_all(s.trust);
  for (const auto& url : s.redis) {
    auto more = semtop::sample_server(url);
    all.insert(all.end(), std::make_move_iterator(more.begin()),
               std::make_move_iterator(more.end()));
  }
  return all;
}

semtop::sort_key parse_sort(const std::string& s) {
  if (s == "util") return semtop::sort_key::util;
  if (s == "waiters") return semtop::sort_key::waiters;
  if (s == "rate") return semtop::sort_key::acquire_rate;
  return semtop::sort_key::key;
}

std::chrono::nanoseconds interval(const settings& s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(s.interval_s));
}

int run_batch(const settings& s, semtop::model& m, const std::string& host) {
  if (s.prometheus) {
    if (s.redis.empty()) {
      std::cout << shmsem::metrics_text();
    } else {
      std::vector<shmsem::Snapshot> snaps;
      int skipped = 0;
      for (auto& one : sample(s)) {
        if (one.snap)
          snaps.push_back(std::move(*one.snap));
        else
          ++skipped;
      }
      std::cout << shmsem::metrics_text(snaps, skipped);
    }
    return std::cout.good() ? 0 : 1;
  }
  const int n = s.once ? 1 : std::max(1, s.iterations);
  for (int i = 0; i < n; ++i) {
    if (i > 0) std::this_thread::sleep_for(interval(s));
    m.update(sample(s), semtop::clock::now());
    if (s.json) continue;  // one document, from the last sample
    if (i > 0) std::cout << "\n";
    semtop::print_table(std::cout, m, host, true);
    std::cout.flush();
  }
  if (s.json) std::cout << semtop::dump_json(semtop::to_json(m, host)) << "\n";
  return std::cout.good() ? 0 : 1;
}

// While the screen is in curses mode nothing may write to stderr, so the
// library's log goes here instead and its latest line is shown on screen.
class last_message_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::optional<std::string> take() {
    std::lock_guard lock(mutex_);
    auto m = std::move(pending_);
    pending_.reset();
    return m;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    pending_ = std::string(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  std::optional<std::string> pending_;
};

struct library_log_capture {
  std::shared_ptr<last_message_sink> sink = std::make_shared<last_message_sink>();
  library_log_capture() { shmsem::set_logger(std::make_shared<spdlog::logger>("shmsem", sink)); }
  ~library_log_capture() { shmsem::set_logger(nullptr); }
};

// Reaps as an administrator: its own segments, or every one as root.
std::string do_reap(const semtop::model& m, const shmsem::Options& trust) {
  int seats = 0, failed = 0, others = 0;
  for (const auto& r : m.rows()) {
    if (!r.ok()) continue;
    try {
      std::string whose;
      seats += shmsem::Semaphore::attach(r.key, semtop::admin_options(r.key, "reap", whose, trust))
                   .reap();
    } catch (const shmsem::SegmentError& e) {
      if (e.code() == shmsem::errc::permission_denied)
        ++others;
      else
        ++failed;
    } catch (const std::exception&) {
      ++failed;
    }
  }
  std::string msg = "reaped " + std::to_string(seats) + " seat" + (seats == 1 ? "" : "s");
  if (failed) msg += " (" + std::to_string(failed) + " failed)";
  if (others) msg += " (" + std::to_string(others) + " of other users skipped)";
  return msg;
}

std::string do_drain(const std::string& key, const shmsem::Options& trust) {
  try {
    std::string whose;
    const int displaced =
        shmsem::Semaphore::attach(key, semtop::admin_options(key, "drain", whose, trust))
            .force_release_all();
    return "drained " + key + (whose.empty() ? "" : " (a segment of " + whose + ")") + ": " +
           std::to_string(displaced) + " live lease" + (displaced == 1 ? "" : "s") + " displaced";
  } catch (const std::exception& e) {
    return "drain failed: " + semtop::describe_error(e);
  }
}

int run_interactive(const settings& s, semtop::model& m, const std::string& host) {
  semtop::terminal::install_signal_handlers();
  {
    library_log_capture log;
    semtop::terminal term(!s.no_color);
    semtop::view v(m, host, s.readonly, term.colors(), s.interval_s);
    // Short getch() timeouts so a quit signal is seen quickly; the refresh
    // itself runs on its own schedule.
    timeout(100);
    auto next_refresh = semtop::clock::now();
    for (;;) {
      if (semtop::terminal::quit_signal()) break;
      const auto now = semtop::clock::now();
      bool redraw = false;
      if (now >= next_refresh) {
        m.update(sample(s), now);
        next_refresh = now + interval(s);
        if (auto msg = log.sink->take()) v.set_message("shmsem: " + *msg);
        redraw = true;
      }
      if (redraw) v.draw();
      const int ch = getch();
      if (ch == ERR) continue;
      const auto res = v.handle_key(ch);
      if (res.quit) break;
      if (res.act == semtop::key_result::action::reap) v.set_message(do_reap(m, s.trust));
      if (res.act == semtop::key_result::action::drain)
        v.set_message(do_drain(res.target, s.trust));
      if (res.act != semtop::key_result::action::none) log.sink->take();  // the message says it
      if (res.act != semtop::key_result::action::none || res.rescan) {
        next_refresh = semtop::clock::now();
      } else if (res.redraw) {
        v.draw();
      }
    }
  }  // the terminal is restored here, on every path out of the loop
  semtop::terminal::reraise_quit_signal();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  CLI::App app{"semtop: live view of the shmsem semaphores of this host (and of Redis servers)",
               "semtop"};
  app.set_version_flag("-V,--version", std::string("semtop ") + shmsem::kVersionString);
  app.add_option("-d,--delay", s.interval_s, "Refresh interval in seconds (default 1)")
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("-n,--iterations", s.iterations,
                 "Print the table N times, one interval apart, then exit (like top -b -n)")
      ->check(CLI::Range(1, 1000000));
  app.add_flag("--once", s.once, "Print the table once as plain text and exit");
  app.add_flag("--json", s.json, "Print one JSON document with every semaphore and exit");
  app.add_flag("--prometheus", s.prometheus, "Print the Prometheus text exposition and exit");
  app.add_flag("--readonly", s.readonly, "Disable the r (reap) and D (force-release) keys");
  app.add_flag("--no-color", s.no_color, "Do not use colours");
  app.add_option("-f,--filter", s.filter, "Show only keys containing this substring");
  app.add_option("-s,--sort", s.sort, "Initial sort: key, util, waiters or rate")
      ->check(CLI::IsMember({"key", "util", "waiters", "rate"}));
  app.add_option("--trust-owner", s.trust.trusted_owners,
                 "Trust segments of this user (name or uid; repeatable): they are not marked "
                 "\"untrusted owner\"")
      ->check(CLI::Validator(semtop::check_user, "USER"));
  app.add_option("--redis", s.redis,
                 "Also show the semaphores of this Redis server (redis://host:port or "
                 "redis+unix://PATH; repeat for more)");
  app.add_flag("--no-local", s.no_local, "Do not show this host's semaphores (with --redis)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2, as shmsem's do; --help and --version exit 0.
    return app.exit(e) == 0 ? 0 : 2;
  }

  semtop::model m;
  m.set_filter(s.filter);
  m.set_sort(parse_sort(s.sort));
  const std::string host = semtop::host_name();
  try {
    if (s.once || s.iterations > 0 || s.json || s.prometheus) return run_batch(s, m, host);
    return run_interactive(s, m, host);
  } catch (const std::exception& e) {
    std::cerr << "semtop: " << e.what() << "\n";
    return 1;
  }
}
