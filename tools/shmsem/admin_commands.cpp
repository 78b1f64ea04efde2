// shmsem/admin_commands.cpp: create, resize, drain, reap, wait-idle, rm, gc.
// drain, resize, reap, rm and gc act on a segment only for its owner or
// root, and say whose segment it is when it is another user's.
#include "commands.hpp"
#include "common.hpp"
#include "model.hpp"
#include "report.hpp"

#include <shmsem/semaphore.hpp>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

namespace shmsem_cli {
namespace {

std::string of_whom(const std::string& whose) {
  return whose.empty() ? "" : " (a segment of " + whose + ")";
}

int create(const std::string& key, int permits, const std::string& mode_text,
           std::optional<shmsem::Fairness> fairness, const shmsem::Options& trust) {
  const auto mode = parse_mode(mode_text);
  if (!mode) {
    error_message("bad --mode (octal, at most 0777): " + mode_text);
    return kUsage;
  }
  try {
    auto existing = shmsem::Semaphore::attach(key, trust);
    const shmsem::Fairness policy = existing.fairness();
    if (fairness && *fairness != policy) {
      error_message(key + ": exists with fairness " + shmsem::to_string(policy) +
                    "; the policy is chosen when a semaphore is created (remove it first)");
      return kFailure;
    }
    if (existing.capacity() == permits) {
      std::printf("%s: exists, capacity %d, fairness %s\n", key.c_str(), permits,
                  shmsem::to_string(policy));
      return kOk;
    }
    error_message(key + ": exists with capacity " + std::to_string(existing.capacity()) +
                  "; use `shmsem resize` to change it");
    return kFailure;
  } catch (const shmsem::SegmentError& e) {
    if (e.code() != shmsem::errc::not_found) throw;
  }
  shmsem::Options opts = trust;
  opts.mode = static_cast<mode_t>(*mode);
  opts.fairness = fairness;
  auto sem = shmsem::Semaphore::open(key, permits, opts);
  std::printf("%s: created, capacity %d, fairness %s\n", key.c_str(), sem.capacity(),
              shmsem::to_string(sem.fairness()));
  return kOk;
}

int resize(const std::string& key, int permits) {
  std::string whose;
  auto sem = semtop::attach_existing(key, semtop::admin_options(key, "resize", whose));
  const int before = sem.capacity();
  sem.set_capacity(permits);
  std::printf("%s: capacity %d -> %d%s\n", key.c_str(), before, permits, of_whom(whose).c_str());
  return kOk;
}

int drain(const std::string& key) {
  std::string whose;
  auto sem = semtop::attach_existing(key, semtop::admin_options(key, "drain", whose));
  const int displaced = sem.force_release_all();
  std::printf("%s: all seats released, %d live holder lease%s displaced%s\n", key.c_str(),
              displaced, displaced == 1 ? "" : "s", of_whom(whose).c_str());
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
  int rc = kOk, others = 0;
  for (const auto& k : keys) {
    try {
      std::string whose;
      shmsem::Options opts;
      try {
        opts = semtop::admin_options(k, "reap", whose);
      } catch (const shmsem::SegmentError& e) {
        // Every semaphore: another user's are theirs to reap (and their
        // own waiters reap them anyway).
        if (!key.empty() || e.code() != shmsem::errc::permission_denied) throw;
        ++others;
        continue;
      }
      const int seats = semtop::attach_existing(k, opts).reap();
      std::printf("%s: reaped %d seat%s%s\n", semtop::printable(k).c_str(), seats,
                  seats == 1 ? "" : "s", of_whom(whose).c_str());
    } catch (const std::exception& e) {
      if (!all) throw;  // one named key: its error is the result
      error_message(semtop::printable(k) + ": " + e.what());
      rc = kFailure;
    }
  }
  if (others)
    std::printf("skipped %d semaphore%s of other users (only their owner or root may reap them)\n",
                others, others == 1 ? "" : "s");
  return rc;
}

int wait_idle(const std::string& key, const std::string& wait_text, const shmsem::Options& trust) {
  auto timeout = shmsem::kMaxDuration;
  if (!wait_text.empty()) {
    const auto d = parse_duration(wait_text);
    if (!d) {
      error_message("bad duration for --wait: " + wait_text);
      return kUsage;
    }
    timeout = std::min(*d, shmsem::kMaxDuration);
  }
  auto sem = semtop::attach_existing(key, trust);
  if (sem.wait_idle(timeout)) return kOk;
  error_message(key + ": still " + std::to_string(sem.used()) + " seat(s) in use after " +
                wait_text);
  return kConflict;
}

// "pid 12 (sleep): holds 1 seat; pid 15 (python3): has it open"
std::string list_users(const std::vector<shmsem::SegmentUser>& users) {
  std::string s;
  for (const auto& u : users) s += (s.empty() ? "" : "; ") + semtop::describe_user(u);
  return s;
}

int rm(const std::string& key, bool force) {
  std::string whose;
  semtop::admin_options(key, "remove", whose);  // not found (3), or not the caller's (4)
  // The same safe test as gc: nobody attached, holding or waiting, and no
  // opener can slip in meanwhile.
  bool removed = false;
  try {
    removed = shmsem::Semaphore::remove_if_unused(key);
  } catch (const shmsem::SegmentError&) {
    if (!force) throw;
    // A symlink or special file at the name: nobody can be using it.
    removed = shmsem::Semaphore::remove(key);
  }
  if (removed) {
    std::printf("removed %s%s\n", semtop::printable(key).c_str(), of_whom(whose).c_str());
    return kOk;
  }
  if (semtop::has_segment_file(key))
    shmsem::Semaphore::owner(key);  // removed meanwhile: not found (3)
  std::vector<shmsem::SegmentUser> users;
  for (auto& u : shmsem::Semaphore::users(key))
    if (!u.removed_copy) users.push_back(std::move(u));
  std::string who = list_users(users);
  if (who.empty())
    who = ::geteuid() == 0 ? "a process that is opening or removing it right now"
                           : "processes of another user, which this user cannot see";
  if (!force) {
    error_message(semtop::printable(key) + ": in use, not removed: " + who +
                  ". Removing it now would split the semaphore in two: they keep the old copy "
                  "while new openers create another, with seats of its own. Stop them first "
                  "(`shmsem info " +
                  semtop::printable(key) + "` lists them), or remove it anyway with --force.");
    return kInUse;
  }
  if (!shmsem::Semaphore::remove(key)) {
    error_message(semtop::printable(key) + ": no such semaphore");
    return kNotFound;
  }
  error_message("warning: " + semtop::printable(key) + " was removed while in use by " + who +
                ". They keep the old copy and new openers get a new semaphore: the bound is "
                "split until they open the key again.");
  std::printf("removed %s%s\n", semtop::printable(key).c_str(), of_whom(whose).c_str());
  return kOk;
}

int gc(bool dry_run, const std::string& prefix, bool token_files_only) {
  int removed = 0, kept = 0, others = 0, rc = kOk;
  const bool root = ::geteuid() == 0;
  for (const auto& key :
       token_files_only ? std::vector<std::string>{} : shmsem::Semaphore::list()) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    try {
      // Another user's segment is theirs to remove (or root's).
      if (!root && shmsem::Semaphore::owner(key).uid != ::geteuid()) {
        ++others;
        ++kept;
        continue;
      }
      if (dry_run) {
        // Only a hint: the real run also refuses segments that some process
        // merely has attached, which a snapshot cannot see.
        auto snap = shmsem::Semaphore::inspect(key);
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
    } catch (const shmsem::SegmentError& e) {
      if (e.code() == shmsem::errc::not_found) continue;  // removed meanwhile
      if (e.code() == shmsem::errc::busy) {               // being made at this moment: in use
        ++kept;
        continue;
      }
      error_message(semtop::printable(key) + ": " + e.what());
      ++kept;
      rc = kFailure;
    } catch (const std::exception& e) {
      error_message(semtop::printable(key) + ": " + e.what());
      ++kept;
      rc = kFailure;
    }
  }
  // The token files that users of removed semaphores left when they
  // exited without letting go (the library keeps any a token is held in).
  // They carry no key, so a gc of one prefix leaves them.
  std::size_t token_files = 0;
  try {
    for (const auto& path : prefix.empty() ? shmsem::Semaphore::remove_orphaned_token_files(dry_run)
                                           : std::vector<std::string>{}) {
      std::printf("%s %s\n", dry_run ? "would remove" : "removed", path.c_str());
      ++token_files;
    }
  } catch (const std::exception& e) {
    error_message(std::string("token files: ") + e.what());
    rc = kFailure;
  }
  if (token_files_only) {
    std::printf("%s %zu token files of removed semaphores\n", dry_run ? "would remove" : "removed",
                token_files);
    return rc;
  }
  std::printf("%s %d, kept %d", dry_run ? "would remove" : "removed", removed, kept);
  if (others) std::printf(" (%d of other users, left to them)", others);
  if (token_files) std::printf("; %zu token files of removed semaphores", token_files);
  std::printf("\n");
  return rc;
}

}  // namespace

void add_admin_commands(CLI::App& app, int& result) {
  {
    struct args {
      std::string key, mode = "0600", fairness;
      int permits = 0;
    };
    auto a = std::make_shared<args>();
    auto trust = std::make_shared<shmsem::Options>();
    auto* cmd = app.add_subcommand("create", "Create a semaphore with N seats");
    cmd->add_option("key", a->key, "Semaphore key")->required();
    cmd->add_option("-p,--permits", a->permits, "Capacity")
        ->required()
        ->check(CLI::Range(1, 1'000'000));
    cmd->add_option("--mode", a->mode, "File mode, octal (default 0600; 0660 shares with group)");
    cmd->add_option("--fairness", a->fairness,
                    "barging (default: running requests may pass the queue for up to 1 ms) "
                    "or fifo (a freed seat goes to the first in line)")
        ->check(CLI::IsMember({"fifo", "barging"}));
    add_trust_option(cmd, trust->trusted_owners);
    cmd->callback([a, trust, &result] {
      std::optional<shmsem::Fairness> fairness;
      if (!a->fairness.empty())
        fairness = a->fairness == "barging" ? shmsem::Fairness::barging : shmsem::Fairness::fifo;
      result = create(a->key, a->permits, a->mode, fairness, *trust);
    });
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
    auto trust = std::make_shared<shmsem::Options>();
    auto* cmd = app.add_subcommand("wait-idle", "Wait until no seat is held (exit 1 on timeout)");
    cmd->add_option("key", *key, "Semaphore key")->required();
    cmd->add_option("-w,--wait", *wait, "Give up after this long (500ms, 10s, 5m, or seconds)");
    add_trust_option(cmd, trust->trusted_owners);
    cmd->callback([key, wait, trust, &result] { result = wait_idle(*key, *wait, *trust); });
  }
  {
    auto key = std::make_shared<std::string>();
    auto force = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand(
        "rm", "Remove a semaphore that no live process uses (exit 6, naming them, if some do)");
    cmd->add_option("key", *key, "Semaphore key")->required();
    cmd->add_flag("--force", *force,
                  "Remove it even while in use: its users keep the old copy, new openers get a "
                  "new semaphore, and the bound is split until they reopen");
    cmd->callback([key, force, &result] { result = rm(*key, *force); });
  }
  {
    auto dry = std::make_shared<bool>(false);
    auto tokens_only = std::make_shared<bool>(false);
    auto prefix = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand(
        "gc", "Remove every semaphore that no live process has attached, holds or waits on");
    cmd->add_flag("--dry-run", *dry, "Only print what looks unused (no holders, no waiters)");
    auto* only = cmd->add_flag("--token-files", *tokens_only,
                               "Only the token files of semaphores that are gone (left by users "
                               "that exited without letting go); no semaphore is removed");
    cmd->add_option("--prefix", *prefix, "Only keys that start with this (one tenant's keys)")
        ->excludes(only);
    cmd->callback(
        [dry, prefix, tokens_only, &result] { result = gc(*dry, *prefix, *tokens_only); });
  }
}

}  // namespace shmsem_cli
