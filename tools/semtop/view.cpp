// semtop/view.cpp: drawing the table, the holder view and the help with
// ncurses, and the key bindings.
#include "view.hpp"

#include "report.hpp"
#include "terminal.hpp"

#include <curses.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace semtop {
namespace {

constexpr int kEsc = 27;
constexpr int kCtrlL = 12;

// Fixed widths of the numeric columns; KEY and the bar share the rest.
constexpr int kUsedCapW = 11, kWaitW = 5, kPctW = 5, kEwmaW = 5, kRateW = 7, kReclW = 9,
              kOldestW = 7;
constexpr int kFixedW =
    kUsedCapW + kWaitW + kPctW + kEwmaW + 2 * kRateW + kReclW + kOldestW + 9;  // + separators
// Owner and mode follow; a narrow terminal cuts them off rather than the figures.
constexpr int kOwnerW = 10, kModeW = 4;

// The mark of an elided key: an ellipsis where the terminal takes UTF-8
// (ncursesw with a UTF-8 locale), else "~", one column either way.
const char* ellipsis() {
  static const char* const mark = MB_CUR_MAX > 1 ? "\u2026" : "~";
  return mark;
}

// Everything drawn goes through here, made printable (keys may hold
// control characters), and cut at the right edge by columns, not bytes.
void put(int y, int x, const std::string& s, attr_t attr = A_NORMAL) {
  if (y < 0 || y >= LINES || x >= COLS) return;
  const std::string text = head_columns(printable(s), std::max(0, COLS - x));
  attron(attr);
  mvaddstr(y, x, text.c_str());
  attroff(attr);
}

std::string fit(const std::string& s, int w, bool right = false) {
  if (w <= 0) return {};
  std::string out = head_columns(s, w);
  if (const int have = text_width(out); have < w) {
    const std::string pad(static_cast<std::size_t>(w - have), ' ');
    out = right ? pad + out : out + pad;
  }
  return out;
}

// The help, word-wrapped to `width`. A key binding's description wraps
// under the description; prose wraps to the left margin.
std::vector<std::string> wrap_help(const std::vector<std::string>& text, int width) {
  constexpr std::size_t kDescriptionAt = 16;
  std::vector<std::string> out;
  for (const std::string& line : text) {
    const bool binding = line.rfind("  ", 0) == 0 && line.size() > kDescriptionAt;
    const std::size_t margin = binding ? kDescriptionAt : 0;
    std::string current = line.substr(0, margin);
    bool no_word = true;  // on `current` yet
    std::istringstream words(line.substr(margin));
    for (std::string word; words >> word;) {
      if (!no_word && static_cast<int>(current.size() + 1 + word.size()) > width) {
        out.push_back(current);
        current.assign(margin, ' ');
        no_word = true;
      }
      if (!no_word) current += ' ';
      current += word;
      no_word = false;
    }
    out.push_back(current);
  }
  return out;
}

// Blank the rest of a line in the given attribute (for the title bars).
void fill_line(int y, attr_t attr) {
  attron(attr);
  mvhline(y, 0, ' ', COLS);
  attroff(attr);
}

}  // namespace

view::view(model& m, std::string host, bool readonly, bool colors, double interval_s)
    : model_(m),
      host_(std::move(host)),
      readonly_(readonly),
      colors_(colors),
      interval_s_(interval_s) {}

int view::selected_index(const std::vector<row>& rows) const {
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].key == selected_key_) return static_cast<int>(i);
  return rows.empty() ? -1 : 0;
}

void view::move_selection(int delta, const std::vector<row>& rows) {
  if (rows.empty()) return;
  int i = selected_index(rows) + delta;
  i = std::clamp(i, 0, static_cast<int>(rows.size()) - 1);
  selected_key_ = rows[i].key;
}

void view::draw() {
  erase();
  const attr_t header_attr = A_BOLD | (colors_ ? COLOR_PAIR(kPairHeader) : A_NORMAL);
  put(0, 0, header_line(model_.sum(), host_), header_attr);
  char line2[160];
  std::snprintf(line2, sizeof line2, "sort: %s   filter: %s   every %.1fs%s",
                to_string(model_.sort()),
                model_.filter().empty() ? "(none)" : model_.filter().c_str(), interval_s_,
                readonly_ ? "   read-only" : "");
  put(1, 0, line2);
  if (!message_.empty()) {
    const int after = static_cast<int>(std::strlen(line2)) + 3;
    put(1, std::min(after, std::max(0, COLS - static_cast<int>(message_.size()) - 1)), message_,
        A_BOLD);
  }
  switch (screen_) {
    case screen::table:
      draw_table(2);
      break;
    case screen::holders:
      draw_holders(2);
      break;
    case screen::help:
      draw_help(2);
      break;
  }
  draw_footer();
  refresh();
}

void view::draw_table(int top) {
  const auto rows = model_.rows();
  const auto titles = column_titles();
  // KEY gets what it needs (at least 8) before the bar gets any room (at
  // most 20), up to 24 columns: a key tells the rows apart, the bar only
  // repeats UTIL%. The bar's leftover goes back to KEY.
  std::size_t longest = 3;
  for (const auto& r : rows)
    longest = std::max(longest, static_cast<std::size_t>(text_width(printable(r.key))));
  int key_w = std::max(8, std::min({static_cast<int>(longest), 24, COLS - kFixedW}));
  int bar_w = std::clamp(COLS - kFixedW - key_w - 1 - 2, 0, 20);
  if (bar_w < 5) bar_w = 0;
  key_w =
      std::max(8, std::min(static_cast<int>(longest), COLS - kFixedW - (bar_w ? bar_w + 3 : 0)));

  const attr_t title_attr = colors_ ? COLOR_PAIR(kPairTitle) : A_REVERSE;
  fill_line(top, title_attr);
  std::string t = fit(titles.key, key_w) + " " + fit(titles.used_cap, kUsedCapW, true) + " " +
                  fit(titles.wait, kWaitW, true) + " ";
  if (bar_w) t += fit("UTIL", bar_w + 2) + " ";
  t += fit(titles.util_pct, kPctW, true) + " " + fit(titles.ewma, kEwmaW, true) + " " +
       fit(titles.acq_rate, kRateW, true) + " " + fit(titles.tmo_rate, kRateW, true) + " " +
       fit(titles.reclaimed, kReclW, true) + " " + fit(titles.oldest, kOldestW, true) + "  " +
       fit(titles.owner, kOwnerW) + " " + fit(titles.mode, kModeW);
  put(top, 0, t, title_attr);

  const int first = top + 1;
  const int visible = std::max(0, LINES - first - 1);
  int sel = selected_index(rows);
  if (sel >= 0) selected_key_ = rows[sel].key;
  if (sel < scroll_) scroll_ = std::max(0, sel);
  if (visible > 0 && sel >= scroll_ + visible) scroll_ = sel - visible + 1;
  scroll_ = std::clamp(scroll_, 0, std::max(0, static_cast<int>(rows.size()) - visible));
  if (rows.empty()) {
    put(first, 0,
        model_.filter().empty() ? "no semaphores on this host"
                                : "no semaphore matches the filter \"" + model_.filter() + "\"");
    return;
  }
  for (int i = 0; i < visible && scroll_ + i < static_cast<int>(rows.size()); ++i) {
    const row& r = rows[scroll_ + i];
    const int y = first + i;
    const bool is_sel = (scroll_ + i) == sel;
    const attr_t base = is_sel ? A_REVERSE : A_NORMAL;
    if (is_sel) fill_line(y, base);
    const auto c = cells(r);
    int x = 0;
    const attr_t bad = base | A_BOLD | (colors_ ? COLOR_PAIR(kPairBad) : A_NORMAL);
    // Another user's claims, not facts this user relies on: the key says so.
    put(y, x, fit(elide_middle(c.key, key_w, ellipsis()), key_w),
        r.untrusted() || r.split_processes() ? bad : base);
    x += key_w + 1;
    if (!r.ok()) {
      std::string text = r.error;
      if (!c.owner.empty()) text += "  (owner " + c.owner + ", mode " + c.mode + ")";
      if (!c.note.empty() && c.note != r.error) text += "  " + c.note;
      put(y, x, text, bad);
      continue;
    }
    put(y, x, fit(c.used_cap, kUsedCapW, true), base);
    x += kUsedCapW + 1;
    attr_t wait_attr = base;
    if (r.waiters() > 0) wait_attr |= A_BOLD | (colors_ ? COLOR_PAIR(kPairWarn) : A_NORMAL);
    put(y, x, fit(c.wait, kWaitW, true), wait_attr);
    x += kWaitW + 1;
    if (bar_w) {
      const double u = r.utilization();
      const short pair = u >= 1.0 ? kPairBad : (u >= 0.75 ? kPairWarn : kPairOk);
      put(y, x, "[", base);
      put(y, x + 1, util_bar(u, bar_w, false),
          base | (colors_ ? COLOR_PAIR(pair) | A_BOLD : A_NORMAL));
      put(y, x + 1 + bar_w, "]", base);
      x += bar_w + 3;
    }
    const std::string rest = fit(c.util_pct, kPctW, true) + " " + fit(c.ewma, kEwmaW, true) + " " +
                             fit(c.acq_rate, kRateW, true) + " " + fit(c.tmo_rate, kRateW, true) +
                             " " + fit(c.reclaimed, kReclW, true) + " " +
                             fit(c.oldest, kOldestW, true) + "  " + fit(c.owner, kOwnerW) + " " +
                             fit(c.mode, kModeW);
    put(y, x, rest, base);
    if (!c.note.empty()) put(y, x + static_cast<int>(rest.size()) + 2, c.note, bad);
  }
}

void view::draw_holders(int top) {
  const auto r = model_.find(selected_key_);
  const attr_t title_attr = colors_ ? COLOR_PAIR(kPairTitle) : A_REVERSE;
  if (!r) {
    put(top, 0, "holders of " + selected_key_ + ": the semaphore is gone");
    return;
  }
  if (!r->ok()) {
    put(top, 0, "holders of " + r->key + ": " + r->error,
        A_BOLD | (colors_ ? COLOR_PAIR(kPairBad) : A_NORMAL));
    return;
  }
  const auto& s = *r->snap;
  std::string title = "holders of " + r->key + "   seats " + std::to_string(s.used) + "/" +
                      std::to_string(s.capacity) + "   waiters: " + std::to_string(s.waiters) +
                      "   leases: " + std::to_string(s.holders.size()) + "   " +
                      shmsem::to_string(s.fairness);
  if (r->owner) title += "   owner " + owner_text(*r->owner) + " " + mode_cell(r->owner->mode);
  const auto c = cells(*r);
  if (!c.note.empty()) title += "   " + c.note;
  put(top, 0, title, A_BOLD);
  const auto t = holder_titles();
  const auto now = model_.updated_at();
  // What tells the holders apart comes first, so that a narrow terminal
  // cuts off the host and the command, never the state (dead or alive).
  int state_w = text_width(t.state), host_w = text_width(t.host);
  for (const auto& h : s.holders) {
    const auto c = cells(h, now);
    state_w = std::max(state_w, text_width(c.state));
    host_w = std::min(16, std::max(host_w, text_width(c.host)));
  }
  auto format = [&](const holder_cells& c) {
    return fit(c.pid, 8, true) + "  " + fit(c.state, state_w) + " " + fit(c.weight, 6, true) + " " +
           fit(c.held_for, 8, true) + " " + fit(c.ttl_left, 9, true) + "  " + fit(c.host, host_w) +
           "  " + c.command;
  };
  fill_line(top + 1, title_attr);
  put(top + 1, 0, format(t), title_attr);
  int y = top + 2;
  if (s.holders.empty()) put(y, 0, "no seat is held");
  for (const auto& h : s.holders) {
    if (y >= LINES - 1) break;
    const auto c = cells(h, now);
    attr_t a = A_NORMAL;
    if (h.state != shmsem::HolderState::alive)
      a = A_BOLD | (colors_ ? COLOR_PAIR(kPairBad) : A_NORMAL);
    put(y++, 0, format(c), a);
  }
}

void view::draw_help(int top) {
  static const std::vector<std::string> kLines = {
      "semtop: live view of the shmsem semaphores of this host",
      "",
      "  q, F10        quit",
      "  Up/Down, j/k  move the selection (PgUp/PgDn, Home/End too)",
      "  Enter         show the holders of the selected semaphore",
      "  Esc           back to the table",
      "  s             cycle the sort: key, util, waiters, acquire rate",
      "  /             filter by key substring (Enter keeps it, Esc cancels)",
      "  r             reap now: reclaim dead holders' and expired seats",
      "  D             force-release every seat of the selected semaphore (asks y/N)",
      "  h, ?          this help",
      "",
      // Paragraphs: wrap_help() breaks them to the terminal's width.
      "Columns: USED/CAP seats in use of capacity; WAIT blocked acquirers; UTIL% used/capacity; "
      "EWMA smoothed utilization (half-life 10s); ACQ/s and TMO/s acquisitions and timeouts "
      "per second; DEAD/EXP leases reclaimed from dead holders / expired TTLs since creation; "
      "OLDEST age of the oldest lease; OWNER and MODE of the segment file. The header's "
      "\"reclaimed\" counts seats reclaimed during the last interval.",
      "",
      "\"untrusted owner\": this user's programs would refuse the segment (another user made "
      "it; --trust-owner USER if that is meant); its figures are that user's claims.",
      "\"split\": processes still use a removed copy of the semaphore: two bounds, one key.",
  };
  std::vector<std::string> lines = wrap_help(kLines, COLS);
  if (readonly_) lines.insert(lines.begin() + 1, "Read-only mode: r and D are disabled.");
  lines.push_back("");
  lines.push_back("Up/Down scroll this help; any other key returns.");
  // What does not fit scrolls (a small terminal, or a narrow one that wrapped much).
  const int visible = std::max(1, LINES - top - 1);
  help_scroll_ = std::clamp(help_scroll_, 0, std::max(0, static_cast<int>(lines.size()) - visible));
  for (int i = 0; i < visible && help_scroll_ + i < static_cast<int>(lines.size()); ++i)
    put(top + i, 0, lines[help_scroll_ + i],
        readonly_ && help_scroll_ + i == 1 ? A_BOLD : A_NORMAL);
}

void view::draw_footer() {
  const int y = LINES - 1;
  if (y < 1) return;
  const attr_t title_attr = colors_ ? COLOR_PAIR(kPairTitle) : A_REVERSE;
  fill_line(y, title_attr);
  switch (prompt_) {
    case prompt::filter:
      put(y, 0, "Filter: " + input_, title_attr);
      curs_set(1);
      move(y, std::min(COLS - 1, 8 + static_cast<int>(input_.size())));
      return;
    case prompt::confirm_drain:
      put(y, 0, "Force-release ALL seats of " + drain_key_ + "? [y/N] ", title_attr | A_BOLD);
      return;
    case prompt::none:
      break;
  }
  curs_set(0);
  std::string keys;
  if (screen_ == screen::help)
    keys = "Up/Down scroll  q quit  any other key: back";
  else if (screen_ == screen::holders)
    keys = "Esc back  q quit  h help";
  else if (readonly_)
    keys = "q quit  Enter holders  s sort  / filter  h help";
  else
    keys = "q quit  Enter holders  s sort  / filter  r reap  D drain  h help";
  put(y, 0, keys, title_attr);
}

key_result view::handle_prompt(int ch) {
  key_result res;
  res.redraw = true;
  if (prompt_ == prompt::confirm_drain) {
    prompt_ = prompt::none;
    if (ch == 'y' || ch == 'Y') {
      res.act = key_result::action::drain;
      res.target = drain_key_;
    } else {
      message_ = "not drained";
    }
    return res;
  }
  // The filter prompt: the table follows what is typed.
  if (ch == kEsc) {
    prompt_ = prompt::none;
    model_.set_filter(filter_before_);
  } else if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
    prompt_ = prompt::none;
  } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
    if (!input_.empty()) input_.pop_back();
    model_.set_filter(input_);
  } else if (ch >= 32 && ch < 127) {
    input_.push_back(static_cast<char>(ch));
    model_.set_filter(input_);
  }
  return res;
}

key_result view::handle_key(int ch) {
  if (ch == KEY_RESIZE) {
    key_result res;
    res.redraw = true;
    return res;
  }
  if (prompt_ != prompt::none) return handle_prompt(ch);
  key_result res;
  res.redraw = true;
  const bool had_message = !message_.empty();
  message_.clear();
  if (screen_ == screen::help) {
    switch (ch) {
      case KEY_UP:
      case 'k':
        --help_scroll_;
        return res;
      case KEY_DOWN:
      case 'j':
        ++help_scroll_;  // draw_help() clamps it
        return res;
      case KEY_PPAGE:
        help_scroll_ -= std::max(1, LINES - 4);
        return res;
      case KEY_NPAGE:
      case ' ':
        help_scroll_ += std::max(1, LINES - 4);
        return res;
    }
    screen_ = screen::table;
    if (ch == 'q' || ch == KEY_F(10)) res.quit = true;
    return res;
  }
  const auto rows = model_.rows();
  switch (ch) {
    case 'q':
    case KEY_F(10):
      res.quit = true;
      break;
    case KEY_UP:
    case 'k':
      move_selection(-1, rows);
      break;
    case KEY_DOWN:
    case 'j':
      move_selection(1, rows);
      break;
    case KEY_PPAGE:
      move_selection(-std::max(1, LINES - 4), rows);
      break;
    case KEY_NPAGE:
      move_selection(std::max(1, LINES - 4), rows);
      break;
    case KEY_HOME:
    case 'g':
      move_selection(-static_cast<int>(rows.size()), rows);
      break;
    case KEY_END:
    case 'G':
      move_selection(static_cast<int>(rows.size()), rows);
      break;
    case '\n':
    case '\r':
    case KEY_ENTER:
      if (screen_ == screen::table && selected_index(rows) >= 0) {
        selected_key_ = rows[selected_index(rows)].key;
        screen_ = screen::holders;
      }
      break;
    case kEsc:
    case KEY_LEFT:
      screen_ = screen::table;
      break;
    case 's':
      model_.cycle_sort();
      break;
    case '/':
      prompt_ = prompt::filter;
      // A new filter replaces the old one; Esc brings the old one back.
      filter_before_ = model_.filter();
      input_.clear();
      model_.set_filter(input_);
      break;
    case 'r':
      if (readonly_)
        message_ = "read-only: reap disabled";
      else
        res.act = key_result::action::reap;
      break;
    case 'D':
      if (readonly_) {
        message_ = "read-only: force-release disabled";
      } else if (selected_index(rows) >= 0) {
        drain_key_ = rows[selected_index(rows)].key;
        prompt_ = prompt::confirm_drain;
      }
      break;
    case 'h':
    case '?':
      screen_ = screen::help;
      help_scroll_ = 0;
      break;
    case kCtrlL:
      clearok(curscr, TRUE);
      break;
    default:
      res.redraw = had_message;
      break;
  }
  return res;
}

}  // namespace semtop
