// shmsem/admin_commands.cpp: create, resize, drain, reap, wait-idle, rm, gc.
#include "commands.hpp"
#include "common.hpp"
#include "model.hpp"
#include "report.hpp"

#include <shmsem/semaphore.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

namespace shmsem_cli {
namespace {

int create(const std::string& key, int permits, const std::string& mode_text) {
  const auto mode = parse_mode(mode_text);
  if (!mode) {
    error_message("bad --mode (octal, at most 0777): " + mode_text);
    return kUsage;
  }
  try {
    auto existing = shmsem::Semaphore::attach(key);
    if (existing.capacity() == permits) {
      std::printf("%s: exists, capacity %d\n", key.c_str(), permits);
      return kOk;
    }
    error_message(key + ": exists with capacity " + std::to_string(existing.capacity()) +
                  "; use `shmsem resize` to change it");
    return kFailure;
  } catch (const shmsem::SegmentError& e) {
    if (e.code() != shmsem::errc::not_found) throw;
  }
  shmsem::Options opts;
  opts.mode = static_cast<mode_t>(*mode);
  auto sem = shmsem::Semaphore::open(key, permits, opts);
  std::printf("%s: created, capacity %d\n", key.c_str(), sem.capacity());
  return kOk;
}

int resize(const std::string& key, int permits) {
  auto sem = semtop::attach_existing(key);
  const int before = sem.capacity();
  sem.set_capacity(permits);
  std::printf("%s: capacity %d -> %d\n", key.c_str(), before, permits);
  return kOk;
}

int drain(const std::string& key) {
  auto sem = semtop::attach_existing(key);
  const int displaced = sem.force_release_all();
  std::printf("%s: all seats released, %d live holder lease%s displaced\n", key.c_str(), displaced,
              displaced == 1 ? "" : "s");
  return kOk;
}

int reap(const std::string& key) {
  std::vector<std::string> keys;
  const bool all = key.empty() || is_server_url(key);
  if (key.empty())
    keys = shmsem::Semaphore::list();
  else if (all)
    keys = shmsem::Semaphore::list(key);
  else
    keys.push_back(key);
  int rc = kOk;
  for (const auto& k : keys) {
    try {
      const int seats = semtop::attach_existing(k).reap();
      std::printf("%s: reaped %d seat%s\n", semtop::printable(k).c_str(), seats,
                  seats == 1 ? "" : "s");
    } catch (const std::exception& e) {
      if (!all) throw;  // one named key: its error is the result
      error_message(semtop::printable(k) + ": " + e.what());
      rc = kFailure;
    }
  }
  return rc;
}

int wait_idle(const std::string& key, const std::string& wait_text) {
  auto timeout = shmsem::kMaxDuration;
  if (!wait_text.empty()) {
    const auto d = parse_duration(wait_text);
    if (!d) {
      error_message("bad duration for --wait: " + wait_text);
      return kUsage;
    }
    timeout = std::min(*d, shmsem::kMaxDuration);
  }
  auto sem = semtop::attach_existing(key);
  if (sem.wait_idle(timeout)) return kOk;
  error_message(key + ": still " + std::to_string(sem.used()) + " seat(s) in use after " +
                wait_text);
  return kConflict;
}

int rm(const std::string& key) {
  if (shmsem::Semaphore::remove(key)) return kOk;
  error_message(key + ": no such semaphore");
  return kNotFound;
}

int gc(bool dry_run, const std::string& prefix) {
  int removed = 0, kept = 0, rc = kOk;
  for (const auto& key : shmsem::Semaphore::list()) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    try {
      if (dry_run) {
        // Only a hint: the real run also refuses segments that some process
        // merely has attached, which a snapshot cannot see.
        auto snap = shmsem::Semaphore::attach(key).snapshot();
        if (snap.used == 0 && snap.waiters == 0 && snap.holders.empty()) {
          std::printf("would remove %s\n", semtop::printable(key).c_str());
          ++removed;
        } else {
          ++kept;
        }
        continue;
      }
      // The library decides "unused" (no process attached, holding or
      // waiting), safely against a process that attaches at this moment.
      if (shmsem::Semaphore::remove_if_unused(key)) {
        std::printf("removed %s\n", semtop::printable(key).c_str());
        ++removed;
      } else {
        ++kept;
      }
    } catch (const std::exception& e) {
      error_message(semtop::printable(key) + ": " + e.what());
      ++kept;
      rc = kFailure;
    }
  }
  std::printf("%s %d, kept %d\n", dry_run ? "would remove" : "removed", removed, kept);
  return rc;
}

}  // namespace

void add_admin_commands(CLI::App& app, int& result) {
  {
    struct args {
      std::string key, mode = "0600";
      int permits = 0;
    };
    auto a = std::make_shared<args>();
    auto* cmd = app.add_subcommand("create", "Create a semaphore with N seats");
    cmd->add_option("key", a->key, "Semaphore key")->required();
    cmd->add_option("-p,--permits", a->permits, "Capacity")
        ->required()
        ->check(CLI::Range(1, 1'000'000));
    cmd->add_option("--mode", a->mode, "File mode, octal (default 0600; 0660 shares with group)");
    cmd->callback([a, &result] { result = create(a->key, a->permits, a->mode); });
  }
  {
    auto key = std::make_shared<std::string>();
    auto permits = std::make_shared<int>(0);
    auto* cmd = app.add_subcommand("resize", "Set the capacity (shrinking takes no seat away)");
    cmd->add_option("key", *key, "Semaphore key")->required();
    cmd->add_option("permits", *permits, "New capacity")
        ->required()
        ->check(CLI::Range(1, 1'000'000));
    cmd->callback([key, permits, &result] { result = resize(*key, *permits); });
  }
  {
    auto key = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand(
        "drain", "Force-release every seat; print how many live holders were displaced");
    cmd->add_option("key", *key, "Semaphore key")->required();
    cmd->callback([key, &result] { result = drain(*key); });
  }
  {
    auto key = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand(
        "reap",
        "Reclaim the seats of dead holders and expired leases (all semaphores, KEY, or every "
        "semaphore of a Redis server)");
    cmd->add_option("key", *key, "Semaphore key, or a Redis server's URL");
    cmd->callback([key, &result] { result = reap(*key); });
  }
  {
    auto key = std::make_shared<std::string>();
    auto wait = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("wait-idle", "Wait until no seat is held (exit 1 on timeout)");
    cmd->add_option("key", *key, "Semaphore key")->required();
    cmd->add_option("-w,--wait", *wait, "Give up after this long (500ms, 10s, 5m, or seconds)");
    cmd->callback([key, wait, &result] { result = wait_idle(*key, *wait); });
  }
  {
    auto key = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand(
        "rm", "Remove a semaphore's name (processes that have it open keep their copy)");
    cmd->add_option("key", *key, "Semaphore key")->required();
    cmd->callback([key, &result] { result = rm(*key); });
  }
  {
    auto dry = std::make_shared<bool>(false);
    auto prefix = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand(
        "gc", "Remove every semaphore that no live process has attached, holds or waits on");
    cmd->add_flag("--dry-run", *dry, "Only print what looks unused (no holders, no waiters)");
    cmd->add_option("--prefix", *prefix, "Only keys that start with this (one tenant's keys)");
    cmd->callback([dry, prefix, &result] { result = gc(*dry, *prefix); });
  }
}

}  // namespace shmsem_cli
