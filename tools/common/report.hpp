// common/report.hpp: the model's rows as text cells, plain-text tables and
// JSON. Shared by semtop's batch modes, its ncurses view (which lays the same
// cells out itself) and the shmsem CLI's ls and info commands.
#pragma once

#include "model.hpp"

#include <nlohmann/json.hpp>

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace semtop {

/// `text` safe to print on a terminal: control characters (a key may hold
/// any byte but NUL) become \n, \t, \r or \xHH, C1 controls encoded as
/// UTF-8 (U+0080-U+009F) become \u00HH, and a byte that is no part of valid
/// UTF-8 becomes \xHH. So a key can neither break a table nor send escape
/// sequences to the operator's terminal (0x9B and U+009B are CSI to some).
std::string printable(std::string_view text);

/// The columns `text` takes on a terminal: its UTF-8 code points (every
/// key is made printable first, so no control character is left to count).
int text_width(std::string_view text);

/// The first `width` columns of `text` (cut at a code point boundary).
std::string head_columns(std::string_view text, int width);

/// `text` cut to at most `width` columns by replacing its middle with
/// `mark`: the start, then the mark, then the longer end, so keys that
/// differ only at the end ("svc.backend.primary", "svc.backend.replica")
/// stay apart. Unchanged when it fits.
std::string elide_middle(std::string_view text, int width, std::string_view mark = "\u2026");

/// True if `text` is valid UTF-8.
bool valid_utf8(std::string_view text);

/// `j` as indented JSON text that is valid UTF-8 whatever its strings hold:
/// a byte that is not UTF-8 (in a key, a process name, an error message)
/// becomes U+FFFD instead of failing the whole document.
std::string dump_json(const nlohmann::json& j);

/// The text of one table row, column by column.
struct row_cells {
  std::string key, used_cap, wait, util_pct, ewma, acq_rate, tmo_rate, reclaimed, oldest;
  std::string owner, mode;
  /// "untrusted owner", "split: N on a removed copy", or both; "" when all is well.
  std::string note;
};
row_cells cells(const row& r);

/// The column titles, in the order of row_cells.
row_cells column_titles();

/// The header line: host, semaphores, seats, waiters, reclaimed.
std::string header_line(const totals& t, const std::string& host);

/// A bar of `width` characters for utilization u (clamped to [0,1]), e.g.
/// "[#####     ]" when brackets is true.
std::string util_bar(double u, int width, bool brackets = true);

/// One holder, as semtop's holder view and `shmsem info` show it.
struct holder_cells {
  std::string host, pid, command, weight, held_for, ttl_left, state;
};
holder_cells cells(const shmsem::Holder& h, clock::time_point now);
holder_cells holder_titles();

/// The width of the KEY column of a plain-text table: the longest key of at
/// most 40 columns (at least 3), or the shortest key when every one is
/// longer. A longer key overflows its own row only.
std::size_t key_column_width(const std::vector<row>& rows);

/// The table as plain text (semtop --once): header, titles, rows.
void print_table(std::ostream& out, const model& m, const std::string& host, bool with_header);

/// The owner column: the user name, or the uid when it has none.
std::string owner_cell(const shmsem::SegmentOwner& o);
/// "0660".
std::string mode_cell(unsigned mode);
/// One process that uses a semaphore, for shmsem info and shmsem rm:
/// "pid 123 (sleep): holds 1 seat (token of pid 120)".
std::string describe_user(const shmsem::SegmentUser& u);

/// One semaphore in detail (shmsem info): counters, stats and holders.
void print_info(std::ostream& out, const row& r, clock::time_point now);

/// JSON of one row: key, capacity, used, waiters, utilization, EWMA, rates,
/// stats (counters and histograms) and holders; {"key", "error"} when
/// unreadable. A key that is not valid UTF-8 also gets "key_hex", its bytes
/// in hex, since "key" shows each invalid byte as U+FFFD.
nlohmann::json to_json(const row& r, clock::time_point now);
/// The whole model: {"host", "semaphores": [...]} .
nlohmann::json to_json(const model& m, const std::string& host);

/// This machine's host name.
std::string host_name();

}  // namespace semtop
