#pragma once
// A small command-line parser for the soma subcommands: `--name value`, `--name=value`,
// positional arguments, `--` (the rest is positional) and `--help`/`-h`. Mistakes throw UsageError; main() prints it as
// one line, "soma train: unknown option --foo (see soma train --help)", and exits with status 2.
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace soma::cli {

// A mistake on the command line (exit status 2), as opposed to a failure while running (1).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ArgParser;

// What parse() found. Typed getters check the value and name the option when it is bad.
class Args {
 public:
  bool help = false;  // --help or -h was given: print help() and exit 0
  std::vector<std::string> positional;

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback = "") const;
  std::optional<std::string> opt_str(const std::string& name) const;
  std::int64_t integer(const std::string& name, std::int64_t fallback, std::int64_t min,
                       std::int64_t max = INT64_MAX) const;
  std::optional<std::int64_t> opt_integer(const std::string& name, std::int64_t min,
                                          std::int64_t max = INT64_MAX) const;
  std::optional<double> opt_real(const std::string& name, double min, double max) const;
  // The value must be one of `choices`.
  std::string choice(const std::string& name, const std::vector<std::string>& choices,
                     const std::string& fallback) const;

 private:
  friend class ArgParser;
  std::map<std::string, std::string> values_;
};

class ArgParser {
 public:
  // `command` is the full command name ("soma train"); `usage` the synopsis after it.
  ArgParser(std::string command, std::string usage, std::string description);

  // An option taking a value (`--epochs 5`, `--epochs=5`); with an empty metavar, a flag that
  // takes none (`--distributed`; Args::has tells whether it was given).
  ArgParser& option(const std::string& name, const std::string& metavar, const std::string& help);
  // Positional arguments, for the help text and the count check.
  ArgParser& positional(const std::string& metavar, const std::string& help, int min_count,
                        int max_count);

  // Parses argv[first..argc). Throws UsageError for an unknown option, a missing value or a
  // wrong number of positional arguments (not when --help was given).
  Args parse(int argc, char** argv, int first) const;
  Args parse(const std::vector<std::string>& argv) const;

  std::string help() const;
  const std::string& command() const { return command_; }

 private:
  struct Opt {
    std::string name, metavar, help;
  };
  const Opt* find(const std::string& name) const;

  std::string command_, usage_, description_;
  std::vector<Opt> opts_;
  std::string pos_metavar_, pos_help_;
  int pos_min_ = 0, pos_max_ = 0;
};

}  // namespace soma::cli
