// semtop/view.hpp: the interactive screen, the only code that uses ncurses.
// It draws the model and turns keys into results; it never calls the
// library itself (main.cpp runs the reap and force-release actions).
#pragma once

#include "model.hpp"

#include <string>

namespace semtop {

/// What a key asks the main loop to do (htop style: flags, no drawing).
struct key_result {
  enum class action { none, reap, drain };
  bool quit = false;
  bool redraw = false;
  bool rescan = false;
  action act = action::none;
  std::string target;  ///< the key of the semaphore to drain
};

class view {
 public:
  view(model& m, std::string host, bool readonly, bool colors, double interval_s);

  /// Draws the whole screen from the model and the view state.
  void draw();
  /// Handles one key from getch() (including KEY_RESIZE).
  key_result handle_key(int ch);
  /// A one-line message shown until the next key.
  void set_message(std::string msg) { message_ = std::move(msg); }

 private:
  enum class screen { table, holders, help };
  enum class prompt { none, filter, confirm_drain };

  void draw_table(int top_line);
  void draw_holders(int top_line);
  void draw_help(int top_line);
  void draw_footer();
  key_result handle_prompt(int ch);
  void move_selection(int delta, const std::vector<row>& rows);
  int selected_index(const std::vector<row>& rows) const;

  model& model_;
  std::string host_;
  bool readonly_;
  bool colors_;
  double interval_s_;
  screen screen_ = screen::table;
  prompt prompt_ = prompt::none;
  std::string input_;          // text typed at the filter prompt
  std::string filter_before_;  // restored when the filter prompt is cancelled
  std::string selected_key_;   // the selection follows the key across refreshes
  std::string drain_key_;
  std::string message_;
  int scroll_ = 0;
  int help_scroll_ = 0;  // first line of the help shown
};

}  // namespace semtop
