// semtop/terminal.cpp: curses mode in, curses mode out, and the signals.
#include "terminal.hpp"

#include <curses.h>
#include <signal.h>
#include <unistd.h>

#include <clocale>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <stdexcept>

namespace semtop {
namespace {

volatile std::sig_atomic_t g_quit_signal = 0;
volatile std::sig_atomic_t g_in_curses = 0;

void on_quit_signal(int sig) {
  g_quit_signal = sig;
}

// Last-resort paths: the process is going down anyway, so leave curses mode
// even though endwin() is not async-signal-safe (htop does the same).
void on_abort(int sig) {
  if (g_in_curses) {
    g_in_curses = 0;
    endwin();
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void on_terminate() {
  if (g_in_curses) {
    g_in_curses = 0;
    endwin();
  }
  std::abort();
}

}  // namespace

void terminal::install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_quit_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(sig, &sa, nullptr);
  struct sigaction ab {};
  ab.sa_handler = on_abort;
  sigemptyset(&ab.sa_mask);
  sigaction(SIGABRT, &ab, nullptr);
  std::set_terminate(on_terminate);
}

terminal::terminal(bool color) {
  if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
    throw std::runtime_error("semtop needs a terminal; use --once, -n, --json or --prometheus");
  std::setlocale(LC_CTYPE, "");  // UTF-8 keys draw as text, not as M- sequences
  if (!initscr()) throw std::runtime_error("cannot initialize the terminal");
  g_in_curses = 1;
  cbreak();  // not raw(): Ctrl-C and Ctrl-Z still make signals
  noecho();
  nonl();
  keypad(stdscr, TRUE);
  set_escdelay(25);
  curs_set(0);
  if (color && has_colors()) {
    start_color();
    use_default_colors();
    init_pair(kPairOk, COLOR_GREEN, -1);
    init_pair(kPairWarn, COLOR_YELLOW, -1);
    init_pair(kPairBad, COLOR_RED, -1);
    init_pair(kPairTitle, COLOR_BLACK, COLOR_CYAN);
    init_pair(kPairHeader, COLOR_CYAN, -1);
    colors_ = true;
  }
}

terminal::~terminal() {
  if (g_in_curses) {
    g_in_curses = 0;
    endwin();
  }
}

int terminal::quit_signal() {
  return g_quit_signal;
}

void terminal::reraise_quit_signal() {
  const int sig = g_quit_signal;
  if (!sig) return;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace semtop
