// semtop/terminal.hpp: owning the terminal. Puts it into curses mode, and
// gives it back on every way out: normal exit, an exception, std::terminate,
// SIGINT/SIGTERM/SIGHUP/SIGQUIT (turned into a quit request the main loop
// sees within one tick) and SIGABRT. Ctrl-Z and resizes are left to ncurses,
// which restores the terminal on suspend and reports KEY_RESIZE.
#pragma once

namespace semtop {

class terminal {
 public:
  /// Enters curses mode. color: use colours if the terminal has them.
  /// Throws std::runtime_error when there is no usable terminal.
  explicit terminal(bool color);
  /// Leaves curses mode (endwin); the terminal is as it was before.
  ~terminal();
  terminal(const terminal&) = delete;
  terminal& operator=(const terminal&) = delete;

  bool colors() const { return colors_; }

  /// Installs the quit-request handlers. Call before the terminal is created
  /// so that ncurses does not install its own.
  static void install_signal_handlers();
  /// The signal that asked semtop to quit, or 0.
  static int quit_signal();
  /// After the terminal is restored: dies of the quit signal, if any, so the
  /// parent sees the usual status. Returns if there was none.
  static void reraise_quit_signal();

 private:
  bool colors_ = false;
};

/// Colour pairs set up by terminal (0 when colours are off).
enum color_pair : short { kPairOk = 1, kPairWarn, kPairBad, kPairTitle, kPairHeader };

}  // namespace semtop
