// common/report.cpp: text cells, plain-text tables and JSON for the rows.
#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>

namespace semtop {
namespace {

std::string percent(double u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", u * 100.0);
  return buf;
}

double seconds(clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

void pad_right(std::ostream& out, const std::string& s, std::size_t w) {
  out << s;
  for (auto i = static_cast<std::size_t>(text_width(s)); i < w; ++i) out << ' ';
}
void pad_left(std::ostream& out, const std::string& s, std::size_t w) {
  for (auto i = static_cast<std::size_t>(text_width(s)); i < w; ++i) out << ' ';
  out << s;
}

// The right-aligned columns after the bar, then owner, mode and the note,
// titles and rows alike.
void print_figures(std::ostream& out, const row_cells& c) {
  const std::pair<const std::string*, std::size_t> figures[] = {
      {&c.util_pct, 5}, {&c.ewma, 5},       {&c.acq_rate, 7},
      {&c.tmo_rate, 7}, {&c.reclaimed, 11}, {&c.oldest, 7}};
  const char* sep = "";
  for (const auto& [text, width] : figures) {
    out << sep;
    pad_left(out, *text, width);
    sep = " ";
  }
  out << "  ";
  pad_right(out, c.owner, 10);
  out << ' ';
  pad_right(out, c.mode, 4);
  if (!c.note.empty()) out << "  " << c.note;
  out << "\n";
}

// owner and mode after an error, for rows that could not be read.
std::string owner_suffix(const row_cells& c) {
  if (c.owner.empty()) return {};
  return "  (owner " + c.owner + ", mode " + c.mode + (c.note.empty() ? "" : ", " + c.note) + ")";
}

nlohmann::json histogram_json(const shmsem::Histogram& h) {
  nlohmann::json j;
  j["bounds_seconds"] = h.kBounds;
  j["counts"] = h.counts;
  j["count"] = h.count();
  j["sum_seconds"] = h.sum_seconds;
  return j;
}

nlohmann::json stats_json(const shmsem::Stats& s) {
  return {{"acquired", s.acquired},
          {"released", s.released},
          {"timeouts", s.timeouts},
          {"cancelled", s.cancelled},
          {"shutdowns", s.shutdowns},
          {"rejected", s.rejected},
          {"try_failures", s.try_failures},
          {"reaped", s.reaped},
          {"expired", s.expired},
          {"force_released", s.force_released},
          {"reclaimed_seats", s.reclaimed_seats},
          {"recoveries", s.recoveries},
          {"wait", histogram_json(s.wait)},
          {"hold", histogram_json(s.hold)}};
}

// Length of the valid UTF-8 sequence at text[i] (1 for ASCII), or 0 when
// text[i] starts none (overlong forms, surrogates and code points above
// U+10FFFF are not valid).
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) return 1;
  std::size_t len;
  std::uint32_t cp;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1Fu;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0Fu;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07u;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  static constexpr std::uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

void escape(std::string& out, const char* format, unsigned value) {
  char buf[8];
  std::snprintf(buf, sizeof buf, format, value);
  out += buf;
}

}  // namespace

std::string printable(std::string_view text) {
  // A URL is shown without its login, as the library's messages show it.
  const std::string redacted = shmsem::Semaphore::shown_key(text);
  text = redacted;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t len = utf8_length(text, i);
    if (len == 0) {
      escape(out, "\\x%02x", c);  // no part of UTF-8; 0x80-0x9F are C1 controls
      ++i;
    } else if (len == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {
      escape(out, "\\u%04x", static_cast<unsigned char>(text[i + 1]));  // U+0080-U+009F
      i += 2;
    } else if (len > 1 || (c >= 0x20 && c != 0x7f)) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      if (c == '\n')
        out += "\\n";
      else if (c == '\t')
        out += "\\t";
      else if (c == '\r')
        out += "\\r";
      else
        escape(out, "\\x%02x", c);
      ++i;
    }
  }
  return out;
}

bool valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = utf8_length(text, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

row_cells column_titles() {
  return {"KEY",   "USED/CAP", "WAIT",   "UTIL%", "EWMA", "ACQ/s",
          "TMO/s", "DEAD/EXP", "OLDEST", "OWNER", "MODE", ""};
}

std::string owner_cell(const shmsem::SegmentOwner& o) {
  return printable(o.user.empty() ? std::to_string(o.uid) : o.user);
}

std::string mode_cell(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

int text_width(std::string_view text) {
  int n = 0;
  for (const unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::string head_columns(std::string_view text, int width) {
  std::size_t i = 0;
  for (int n = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && n++ == width) break;
  }
  return std::string(text.substr(0, i));
}

std::string elide_middle(std::string_view text, int width, std::string_view mark) {
  const int have = text_width(text);
  if (have <= width) return std::string(text);
  const int mark_w = text_width(mark);
  if (width <= mark_w) return head_columns(text, width);
  // Keys tend to differ at the end (replicas, tenants, shards): keep more of it.
  const int head = (width - mark_w) / 3;
  const int tail = width - mark_w - head;
  const std::string start = head_columns(text, head);
  const std::string skipped = head_columns(text, have - tail);
  return start + std::string(mark) + std::string(text.substr(skipped.size()));
}

std::string describe_user(const shmsem::SegmentUser& u) {
  std::string s = (u.pid > 0 ? "pid " + std::to_string(u.pid) : std::string("a process")) + " (" +
                  printable(u.command.empty() ? "?" : u.command) + ")";
  if (u.pid <= 0) s += " in another PID namespace";
  std::vector<std::string> what;
  if (u.seats > 0)
    what.push_back("holds " + std::to_string(u.seats) + " seat" + (u.seats == 1 ? "" : "s"));
  if (u.waiting > 0) what.push_back("waits");
  if (what.empty()) what.push_back(u.attached ? "has it open" : "has the file open");
  std::string joined;
  for (const auto& w : what) joined += (joined.empty() ? "" : ", ") + w;
  s += ": " + joined;
  if (u.holder_pid > 0 && u.holder_pid != u.pid)
    s += " (inherited from pid " + std::to_string(u.holder_pid) + ")";
  if (u.removed_copy) s += " on a removed copy";
  return s;
}

row_cells cells(const row& r) {
  row_cells c;
  c.key = printable(r.key);
  if (r.owner) {
    c.owner = owner_cell(*r.owner);
    c.mode = mode_cell(r.owner->mode);
  }
  if (r.untrusted()) c.note = "untrusted owner";
  if (const int n = r.split_processes())
    c.note += std::string(c.note.empty() ? "" : ", ") + "split: " + std::to_string(n) +
              " on a removed copy";
  if (!r.snap) return c;
  const auto& s = *r.snap;
  c.used_cap = std::to_string(s.used) + "/" + std::to_string(s.capacity);
  c.wait = std::to_string(s.waiters);
  c.util_pct = percent(s.utilization);
  c.ewma = percent(s.utilization_smoothed);
  c.acq_rate = format_rate(r.acquire_rate);
  c.tmo_rate = format_rate(r.timeout_rate);
  c.reclaimed = std::to_string(s.stats.reaped) + "/" + std::to_string(s.stats.expired);
  c.oldest = format_age(r.oldest_hold);
  return c;
}

std::string header_line(const totals& t, const std::string& host) {
  std::string s = "semtop - " + host + " - " + std::to_string(t.semaphores) + " semaphore" +
                  (t.semaphores == 1 ? "" : "s");
  if (t.unreadable) s += " (" + std::to_string(t.unreadable) + " unreadable)";
  s += " - seats " + std::to_string(t.used) + "/" + std::to_string(t.capacity) + " used - " +
       std::to_string(t.waiters) + " waiting - " + std::to_string(t.reclaimed_interval) +
       " reclaimed";
  return s;
}

std::string util_bar(double u, int width, bool brackets) {
  if (width <= 0) return {};
  const double clamped = std::clamp(u, 0.0, 1.0);
  const int filled = static_cast<int>(clamped * width + 0.5);
  std::string s = brackets ? "[" : "";
  s.append(static_cast<std::size_t>(filled), '#');
  s.append(static_cast<std::size_t>(width - filled), ' ');
  if (brackets) s += "]";
  return s;
}

holder_cells holder_titles() {
  return {"HOST", "PID", "COMMAND", "WEIGHT", "HELD", "TTL LEFT", "STATE"};
}

holder_cells cells(const shmsem::Holder& h, clock::time_point now) {
  holder_cells c;
  c.host = h.host.empty() ? local_host() : printable(h.host);
  if (h.pid > 0) {
    c.pid = std::to_string(h.pid);
    c.command = holder_command(h);
  } else {
    c.pid = "?";
    c.command = "?";
  }
  if (h.foreign_namespace) c.command += " (other pid ns)";
  c.weight = std::to_string(h.weight);
  c.held_for = format_age(std::max(clock::duration::zero(), now - h.acquired_at));
  if (h.expires_at) {
    const auto left = *h.expires_at - now;
    if (left <= clock::duration::zero()) {
      c.ttl_left = "0s";
    } else {
      char buf[32];
      if (left < std::chrono::seconds(10))
        std::snprintf(buf, sizeof buf, "%.1fs", seconds(left));
      else
        std::snprintf(buf, sizeof buf, "%s", format_age(left).c_str());
      c.ttl_left = buf;
    }
  } else {
    c.ttl_left = "-";
  }
  switch (h.state) {
    case shmsem::HolderState::alive:
      c.state = "alive";
      break;
    case shmsem::HolderState::dead:
      c.state = "dead (reclaimable)";
      break;
    case shmsem::HolderState::expired:
      c.state = "expired";
      break;
  }
  return c;
}

std::size_t key_column_width(const std::vector<row>& rows) {
  // Only the keys that fit in kMaxKeyColumn set the width: a longer key is
  // shown whole (scripts match it) and pushes only its own row's figures
  // to the right, instead of every row's. When every key is longer, the
  // shortest sets it, so that a table of one long key stays aligned.
  constexpr std::size_t kMaxKeyColumn = 40;
  std::size_t kw = 3, shortest = SIZE_MAX;
  for (const auto& r : rows) {
    const auto w = static_cast<std::size_t>(text_width(printable(r.key)));
    if (w <= kMaxKeyColumn) kw = std::max(kw, w);
    shortest = std::min(shortest, w);
  }
  return shortest != SIZE_MAX && shortest > kMaxKeyColumn ? shortest : kw;
}

void print_table(std::ostream& out, const model& m, const std::string& host, bool with_header) {
  const auto rows = m.rows();
  if (with_header) out << header_line(m.sum(), host) << " - sort " << to_string(m.sort()) << "\n";
  const std::size_t kw = key_column_width(rows);
  const auto t = column_titles();
  constexpr int kBar = 20;
  pad_right(out, t.key, kw);
  out << ' ';
  pad_left(out, t.used_cap, 11);
  out << ' ';
  pad_left(out, t.wait, 5);
  out << ' ';
  pad_right(out, "UTIL", kBar + 2);
  out << ' ';
  print_figures(out, t);
  for (const auto& r : rows) {
    const auto c = cells(r);
    pad_right(out, c.key, kw);
    out << ' ';
    if (!r.ok()) {
      out << printable(r.error) << owner_suffix(c) << "\n";
      continue;
    }
    pad_left(out, c.used_cap, 11);
    out << ' ';
    pad_left(out, c.wait, 5);
    out << ' ' << util_bar(r.utilization(), kBar) << ' ';
    print_figures(out, c);
  }
}

void print_info(std::ostream& out, const row& r, clock::time_point now) {
  auto field = [&](const char* name, const std::string& value) {
    out << name << ':';
    for (std::size_t i = std::char_traits<char>::length(name); i < 16; ++i) out << ' ';
    out << value << "\n";
  };
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  field("key", printable(r.key));
  if (r.owner) {
    const auto& o = *r.owner;
    field("owner", printable(owner_text(o)));
    field("group", printable(o.group.empty() ? "gid " + std::to_string(o.gid)
                                             : o.group + " (gid " + std::to_string(o.gid) + ")"));
    field("mode", mode_cell(o.mode));
    const std::string who = o.user.empty() ? std::to_string(o.uid) : o.user;
    field("trust", o.trusted ? std::string("trusted by this user")
                             : "UNTRUSTED OWNER: this user's open() refuses it, and what it "
                               "holds is whatever " +
                                   printable(who) + " wrote (--trust-owner " + printable(who) +
                                   " if that is meant)");
  }
  auto print_users = [&] {
    if (const int n = r.split_processes())
      field("split", std::to_string(n) + " process" + (n == 1 ? "" : "es") +
                         " still use a removed copy of this semaphore: they and the processes "
                         "that open the key now count separate bounds");
    if (r.users.empty()) return;
    field("processes", std::to_string(r.users.size()));
    for (const auto& u : r.users) out << "  " << describe_user(u) << "\n";
  };
  if (!r.ok()) {
    field("error", printable(r.error));
    print_users();
    return;
  }
  const auto& s = *r.snap;
  const auto& st = s.stats;
  field("capacity", std::to_string(s.capacity));
  field("used", std::to_string(s.used));
  field("waiters", std::to_string(s.waiters));
  field("utilization", percent(s.utilization));
  field("ewma", percent(s.utilization_smoothed) + " (half-life " +
                    std::to_string(shmsem::kEwmaHalfLife.count()) + "s)");
  field("acquired", num(st.acquired));
  field("released", num(st.released));
  field("timeouts", num(st.timeouts));
  field("cancelled", num(st.cancelled));
  field("shutdowns", num(st.shutdowns));
  field("rejected", num(st.rejected));
  field("try failures", num(st.try_failures));
  field("reaped", num(st.reaped) + " (leases of dead holders)");
  field("expired", num(st.expired) + " (leases whose TTL ran out)");
  field("force released", num(st.force_released));
  field("reclaimed seats", num(st.reclaimed_seats));
  field("recoveries", num(st.recoveries));
  auto mean = [](const shmsem::Histogram& h) {
    const auto n = h.count();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6fs over %llu",
                  n ? h.sum_seconds / static_cast<double>(n) : 0.0,
                  static_cast<unsigned long long>(n));
    return std::string(buf);
  };
  field("fairness", shmsem::to_string(s.fairness));
  if (!s.death_wakeup.empty()) field("deaths", printable(s.death_wakeup));
  field("mean wait", mean(st.wait) + " grants");
  field("mean hold", mean(st.hold) + " releases");
  print_users();
  field("holders", std::to_string(s.holders.size()));
  if (s.holders.empty()) return;
  const auto t = holder_titles();
  char line[256];
  std::snprintf(line, sizeof line, "  %-16s %8s  %-24s %6s %8s %9s  %s\n", t.host.c_str(),
                t.pid.c_str(), t.command.c_str(), t.weight.c_str(), t.held_for.c_str(),
                t.ttl_left.c_str(), t.state.c_str());
  out << line;
  for (const auto& h : s.holders) {
    const auto c = cells(h, now);
    std::snprintf(line, sizeof line, "  %-16s %8s  %-24s %6s %8s %9s  %s\n", c.host.c_str(),
                  c.pid.c_str(), c.command.c_str(), c.weight.c_str(), c.held_for.c_str(),
                  c.ttl_left.c_str(), c.state.c_str());
    out << line;
  }
}

nlohmann::json to_json(const row& r, clock::time_point now) {
  nlohmann::json j;
  j["key"] = r.key;
  if (!valid_utf8(r.key)) {
    std::string hex;
    for (const unsigned char c : r.key) escape(hex, "%02x", c);
    j["key_hex"] = hex;
  }
  if (r.owner) {
    const auto& o = *r.owner;
    j["owner"] = {{"uid", o.uid},
                  {"user", o.user},
                  {"gid", o.gid},
                  {"group", o.group},
                  {"mode", mode_cell(o.mode)},
                  {"trusted", o.trusted}};
  }
  j["untrusted_owner"] = r.untrusted();
  auto users = nlohmann::json::array();
  for (const auto& u : r.users)
    users.push_back({{"pid", u.pid},
                     {"command", u.command},
                     {"removed_copy", u.removed_copy},
                     {"attached", u.attached},
                     {"seats", u.seats},
                     {"waiting", u.waiting},
                     {"holder_pid", u.holder_pid}});
  j["processes"] = std::move(users);
  j["split_processes"] = r.split_processes();
  if (!r.ok()) {
    j["error"] = r.error;
    return j;
  }
  const auto& s = *r.snap;
  j["capacity"] = s.capacity;
  j["used"] = s.used;
  j["waiters"] = s.waiters;
  j["utilization"] = s.utilization;
  j["utilization_smoothed"] = s.utilization_smoothed;
  j["fairness"] = shmsem::to_string(s.fairness);
  if (!s.death_wakeup.empty()) j["death_wakeup"] = s.death_wakeup;
  j["acquire_rate"] = r.acquire_rate ? nlohmann::json(*r.acquire_rate) : nlohmann::json();
  j["timeout_rate"] = r.timeout_rate ? nlohmann::json(*r.timeout_rate) : nlohmann::json();
  j["reclaimed_interval"] = r.reclaimed_interval;
  j["oldest_hold_seconds"] =
      r.oldest_hold ? nlohmann::json(seconds(*r.oldest_hold)) : nlohmann::json();
  j["stats"] = stats_json(s.stats);
  auto holders = nlohmann::json::array();
  for (const auto& h : s.holders) {
    nlohmann::json hj;
    hj["host"] = h.host.empty() ? local_host() : h.host;
    hj["pid"] = h.pid;
    hj["command"] = holder_command(h);
    hj["foreign_namespace"] = h.foreign_namespace;
    hj["permit_id"] = h.permit_id;
    hj["weight"] = h.weight;
    hj["held_seconds"] = seconds(std::max(clock::duration::zero(), now - h.acquired_at));
    hj["ttl_left_seconds"] =
        h.expires_at ? nlohmann::json(seconds(*h.expires_at - now)) : nlohmann::json();
    hj["state"] = shmsem::to_string(h.state);
    holders.push_back(std::move(hj));
  }
  j["holders"] = std::move(holders);
  return j;
}

nlohmann::json to_json(const model& m, const std::string& host) {
  nlohmann::json j;
  j["host"] = host;
  auto arr = nlohmann::json::array();
  for (const auto& r : m.rows()) arr.push_back(to_json(r, m.updated_at()));
  j["semaphores"] = std::move(arr);
  return j;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace semtop
