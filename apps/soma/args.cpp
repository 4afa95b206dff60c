#include "args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace soma::cli {

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::optional<std::string> Args::opt_str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::int64_t> Args::opt_integer(const std::string& name, std::int64_t min,
                                              std::int64_t max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  const std::string& v = it->second;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < min || x > max) {
    std::string range = max == INT64_MAX ? "an integer >= " + std::to_string(min)
                                         : "an integer in " + std::to_string(min) + ".." +
                                               std::to_string(max);
    throw UsageError("bad value for --" + name + ": '" + v + "' (expected " + range + ")");
  }
  return x;
}

std::int64_t Args::integer(const std::string& name, std::int64_t fallback, std::int64_t min,
                           std::int64_t max) const {
  return opt_integer(name, min, max).value_or(fallback);
}

std::optional<double> Args::opt_real(const std::string& name, double min, double max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  const std::string& v = it->second;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || x < min || x > max) {
    std::ostringstream os;
    os << "bad value for --" << name << ": '" << v << "' (expected a number in [" << min << ", "
       << max << "])";
    throw UsageError(os.str());
  }
  return x;
}

std::string Args::choice(const std::string& name, const std::vector<std::string>& choices,
                         const std::string& fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  for (const auto& c : choices)
    if (c == it->second) return c;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  throw UsageError("bad value for --" + name + ": '" + it->second + "' (expected one of " + list +
                   ")");
}

ArgParser::ArgParser(std::string command, std::string usage, std::string description)
    : command_(std::move(command)), usage_(std::move(usage)), description_(std::move(description)) {}

ArgParser& ArgParser::option(const std::string& name, const std::string& metavar,
                             const std::string& help) {
  opts_.push_back({name, metavar, help});
  return *this;
}

ArgParser& ArgParser::positional(const std::string& metavar, const std::string& help,
                                 int min_count, int max_count) {
  pos_metavar_ = metavar;
  pos_help_ = help;
  pos_min_ = min_count;
  pos_max_ = max_count;
  return *this;
}

namespace {
// Short options: one letter means the same long option in every command that has it
// (`-e 5` is `--epochs 5`, `-b64` is `--batch-size 64`).
constexpr std::pair<char, const char*> kShort[] = {
    {'e', "epochs"}, {'b', "batch-size"}, {'d', "data"},    {'m', "model"}, {'c', "config"},
    {'o', "out"},    {'t', "threads"},    {'s', "seed"},    {'v', "verbose"}};
const char* long_name_of(char c) {
  for (const auto& [k, name] : kShort)
    if (k == c) return name;
  return nullptr;
}
char short_name_of(const std::string& name) {
  for (const auto& [k, n] : kShort)
    if (name == n) return k;
  return 0;
}
}  // namespace

const ArgParser::Opt* ArgParser::find(const std::string& name) const {
  for (const auto& o : opts_)
    if (o.name == name) return &o;
  return nullptr;
}

Args ArgParser::parse(int argc, char** argv, int first) const {
  return parse(std::vector<std::string>(argv + first, argv + argc));
}

Args ArgParser::parse(const std::vector<std::string>& argv) const {
  Args a;
  bool options_done = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (options_done || arg.size() < 2 || arg[0] != '-') {
      a.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      a.help = true;
      continue;
    }
    std::string name, value;
    bool inline_value = false;
    if (arg.rfind("--", 0) != 0) {
      // -x, -xVALUE or -x VALUE for the short form of an option this command has.
      const char* long_name = long_name_of(arg[1]);
      if (!long_name || !find(long_name)) throw UsageError("unknown option " + arg);
      name = long_name;
      if (arg.size() > 2) {
        value = arg.substr(arg[2] == '=' ? 3 : 2);
        inline_value = true;
      }
    } else {
      name = arg.substr(2);
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inline_value = true;
      }
    }
    const Opt* o = find(name);
    if (!o) throw UsageError("unknown option --" + name);
    if (o->metavar.empty()) {  // a flag: present or not
      if (inline_value) throw UsageError("option --" + name + " takes no value");
      value = "1";
    } else if (!inline_value) {
      if (i + 1 >= argv.size()) throw UsageError("option --" + name + " needs a value");
      value = argv[++i];
    }
    a.values_[name] = value;  // the last one given wins, as in most tools
  }
  if (!a.help) {
    const int n = static_cast<int>(a.positional.size());
    if (n < pos_min_)
      throw UsageError(pos_metavar_.empty() ? "missing argument"
                                            : "missing argument " + pos_metavar_);
    if (n > pos_max_) throw UsageError("unexpected argument '" + a.positional[pos_max_] + "'");
  }
  return a;
}

std::string ArgParser::help() const {
  std::ostringstream os;
  os << "usage: " << command_ << (usage_.empty() ? "" : " ") << usage_ << "\n\n"
     << description_ << "\n";
  if (!pos_metavar_.empty()) os << "\narguments:\n  " << pos_metavar_ << "\n      " << pos_help_ << "\n";
  os << "\noptions:\n";
  for (const auto& o : opts_) {
    const char c = short_name_of(o.name);
    std::string head = std::string("  ") + (c ? std::string("-") + c + ", " : "") + "--" + o.name +
                       (o.metavar.empty() ? "" : " " + o.metavar);
    std::string text = o.help;  // continuation lines keep the indentation
    for (auto pos = text.find('\n'); pos != std::string::npos; pos = text.find('\n', pos + 7))
      text.replace(pos, 1, "\n      ");
    os << head << "\n      " << text << "\n";
  }
  os << "  -h, --help\n      show this help and exit\n";
  return os.str();
}

}  // namespace soma::cli
