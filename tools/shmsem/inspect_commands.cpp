// shmsem/inspect_commands.cpp: ls, info and metrics. They read through the
// library's read-only inspection (the same model semtop uses): they never
// attach, never write to a segment and never stall the fleet, and they show
// a segment of an untrusted owner as such instead of refusing it.
#include "commands.hpp"
#include "common.hpp"
#include "model.hpp"
#include "report.hpp"

#include <shmsem/metrics.hpp>
#include <shmsem/semaphore.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

namespace shmsem_cli {
namespace {

int ls(bool json, const shmsem::Options& trust, const std::string& server) {
  if (!server.empty() && !is_server_url(server))
    throw std::invalid_argument("ls: '" + semtop::printable(server) +
                                "' is not the URL of a Redis server (redis://host:port)");
  semtop::model m;
  m.update(server.empty() ? semtop::sample_all(trust) : semtop::sample_server(server),
           semtop::clock::now());
  const auto rows = m.rows();
  if (json) {
    auto arr = nlohmann::json::array();
    for (const auto& r : rows) arr.push_back(semtop::to_json(r, m.updated_at()));
    std::cout << semtop::dump_json(arr) << "\n";
    return kOk;
  }
  const int w = static_cast<int>(semtop::key_column_width(rows));
  std::printf("%-*s %11s %5s %5s %5s %7s %7s  %-10s %-4s\n", w, "KEY", "USED/CAP", "WAIT", "UTIL%",
              "EWMA", "HOLDERS", "OLDEST", "OWNER", "MODE");
  for (const auto& r : rows) {
    const auto c = semtop::cells(r);
    const std::string note = c.note.empty() ? "" : "  " + c.note;
    if (!r.ok()) {
      std::printf("%-*s %s%s%s\n", w, semtop::printable(r.key).c_str(),
                  semtop::printable(r.error).c_str(),
                  c.owner.empty() ? "" : ("  (owner " + c.owner + ", mode " + c.mode + ")").c_str(),
                  c.note == r.error ? "" : note.c_str());
      continue;
    }
    std::printf("%-*s %11s %5s %5s %5s %7zu %7s  %-10s %-4s%s\n", w, c.key.c_str(),
                c.used_cap.c_str(), c.wait.c_str(), c.util_pct.c_str(), c.ewma.c_str(),
                r.snap->holders.size(), c.oldest.c_str(), c.owner.c_str(), c.mode.c_str(),
                note.c_str());
  }
  return kOk;
}

int info(const std::string& key, bool json, const shmsem::Options& trust) {
  // Read-only and without trusting the owner: info shows whose it is
  // instead. Read first, so "no such semaphore" and "corrupt" keep their codes.
  semtop::sample s;
  s.key = key;
  try {
    s.snap = semtop::inspect_existing(key, trust);
  } catch (const std::exception& e) {
    std::string what = e.what();
    try {
      const auto o = shmsem::Semaphore::owner(key, trust);
      what += " (owner " + semtop::owner_text(o) + ", mode " + semtop::mode_cell(o.mode) + ")";
    } catch (const std::exception&) {
    }
    error_message(what);
    return exit_code_for(e);
  }
  s.snap->key = key;
  s.owner = s.snap->owner;
  try {
    s.users = shmsem::Semaphore::users(key);
  } catch (const std::exception&) {
  }
  std::vector<semtop::sample> v;
  v.push_back(std::move(s));
  semtop::model m;
  m.update(std::move(v), semtop::clock::now());
  const auto r = m.rows().at(0);
  if (json)
    std::cout << semtop::dump_json(semtop::to_json(r, m.updated_at())) << "\n";
  else
    semtop::print_info(std::cout, r, m.updated_at());
  return kOk;
}

int metrics(const std::string& textfile, const std::string& server) {
  if (!server.empty()) {
    if (!textfile.empty())
      throw std::invalid_argument("metrics: --textfile writes this host's metrics only");
    if (!is_server_url(server))
      throw std::invalid_argument("metrics: '" + semtop::printable(server) +
                                  "' is not the URL of a Redis server (redis://host:port)");
    std::vector<shmsem::Snapshot> snaps;
    int skipped = 0;
    for (auto& s : semtop::sample_server(server)) {
      if (s.snap)
        snaps.push_back(std::move(*s.snap));
      else
        ++skipped;
    }
    std::cout << shmsem::metrics_text(snaps, skipped);
    return kOk;
  }
  if (textfile.empty())
    std::cout << shmsem::metrics_text();
  else
    shmsem::write_metrics_textfile(textfile);
  return kOk;
}

}  // namespace

void add_inspect_commands(CLI::App& app, int& result) {
  {
    auto json = std::make_shared<bool>(false);
    auto trust = std::make_shared<shmsem::Options>();
    auto server = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand(
        "ls",
        "List the semaphores of this host, with owner and mode (read-only, any owner), or of a "
        "Redis server");
    cmd->add_option("server", *server, "A Redis server's URL (redis://host:port)");
    cmd->add_flag("--json", *json, "Print JSON: every semaphore with its stats and holders");
    add_trust_option(cmd, trust->trusted_owners);
    cmd->callback([json, trust, server, &result] { result = ls(*json, *trust, *server); });
  }
  {
    auto key = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    auto trust = std::make_shared<shmsem::Options>();
    auto* cmd = app.add_subcommand(
        "info",
        "Show owner, capacity, used, waiters, EWMA, stats, holders and the processes using one "
        "semaphore (read-only, any owner)");
    cmd->add_option("key", *key, "Semaphore key")->required();
    cmd->add_flag("--json", *json, "Print JSON");
    add_trust_option(cmd, trust->trusted_owners);
    cmd->callback([key, json, trust, &result] { result = info(*key, *json, *trust); });
  }
  {
    auto textfile = std::make_shared<std::string>();
    auto server = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand(
        "metrics", "Print every semaphore's metrics in the Prometheus text exposition format");
    cmd->add_option("server", *server,
                    "A Redis server's URL: its semaphores instead of the host's");
    cmd->add_option("--textfile", *textfile,
                    "Write atomically to this file instead (node_exporter textfile collector)");
    cmd->callback([textfile, server, &result] { result = metrics(*textfile, *server); });
  }
}

}  // namespace shmsem_cli
