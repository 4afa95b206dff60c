// soma: train, evaluate and run networks from the command line.
//   soma train --model mlp --epochs 5 --batch-size 32 --seed 1 --out mlp.soma
//   soma eval mlp.soma
//   soma predict mlp.soma shoe.png
//   soma summary mlp.soma
//   soma bench --workload mlp_train --threads 2 --batch 32
//   soma export mlp.soma mlp.onnx
//   soma info
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "common.hpp"

namespace soma::detail {
// libsoma's "5.1 GiB" (src/internal/runtime_checks.hpp)
std::string memory_size_str(std::size_t n);
}

#ifndef SOMA_CLI_VERSION
#define SOMA_CLI_VERSION "0.0.0"
#endif

namespace {

using namespace soma::cli;

struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Subcommand kSubcommands[] = {
    {"train", cmd_train, "train a network (built-in or from a JSON config) and save it"},
    {"eval", cmd_eval, "loss, accuracy, per-class accuracy and confusion matrix of a model file"},
    {"predict", cmd_predict, "top classes with probabilities for PNG images"},
    {"summary", cmd_summary, "the layer table of a model file"},
    {"bench", cmd_bench, "machine-readable benchmark lines (bench workload=... value=...)"},
    {"export", cmd_export, "write a model file as ONNX (soma export MODEL OUT.onnx)"},
    {"info", cmd_info, "version, build, CPU threads and CUDA devices (name, memory, versions)"},
};

void print_help(std::FILE* f) {
  std::fprintf(f,
               "usage: soma <command> [options]\n\n"
               "soma %s: a C++ deep-learning framework's command-line tool.\n\ncommands:\n",
               SOMA_CLI_VERSION);
  for (const auto& s : kSubcommands) std::fprintf(f, "  %-9s %s\n", s.name, s.summary);
  std::fprintf(f,
               "\noptions:\n  -h, --help     show this help and exit\n"
               "  --version      print the version and exit\n"
               "  --memory-limit SIZE\n"
               "                 the most memory soma's tensors may hold together, e.g. 512M,\n"
               "                 2G (default: SOMA_MEMORY_LIMIT, else what the system can give);\n"
               "                 going over it is an error, not a kill by the OOM killer\n\n"
               "Run 'soma help <command>' or 'soma <command> --help' for the options of a command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  // Global options before the command: --memory-limit SIZE (or --memory-limit=SIZE).
  while (argc >= 2 && std::strncmp(argv[1], "--memory-limit", 14) == 0 &&
         (argv[1][14] == '\0' || argv[1][14] == '=')) {
    const bool inline_value = argv[1][14] == '=';
    if (!inline_value && argc < 3) {
      std::fprintf(stderr,
                   "soma: --memory-limit needs a size, e.g. 512M or 2G (see soma --help)\n");
      return kExitUsage;
    }
    const char* value = inline_value ? argv[1] + 15 : argv[2];
    try {
      soma::set_memory_limit(soma::parse_memory_size(value));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "soma: --memory-limit: %s\n", e.what());
      return kExitUsage;
    }
    const int used = inline_value ? 1 : 2;
    argv[used] = argv[0];
    argv += used;
    argc -= used;
  }
  if (argc < 2) {
    print_help(stderr);
    return kExitUsage;
  }
  const std::string first = argv[1];
  if (first == "help" && argc >= 3) {
    // `soma help train` is `soma train --help`, as git and cargo do it.
    const std::string name = argv[2];
    for (const auto& s : kSubcommands)
      if (name == s.name) {
        static char help_flag[] = "--help";
        char* args[] = {help_flag, nullptr};
        return s.run(1, args);
      }
    std::fprintf(stderr, "soma help: unknown command '%s' (see soma --help)\n", name.c_str());
    return kExitUsage;
  }
  if (first == "-h" || first == "--help" || first == "help") {
    print_help(stdout);
    return 0;
  }
  if (first == "--version" || first == "-V") {
    std::printf("soma %s\n", SOMA_CLI_VERSION);
    return 0;
  }
  const Subcommand* cmd = nullptr;
  for (const auto& s : kSubcommands)
    if (first == s.name) cmd = &s;
  if (!cmd) {
    if (first.rfind("-", 0) == 0)
      std::fprintf(stderr, "soma: unknown option %s (see soma --help)\n", first.c_str());
    else
      std::fprintf(stderr, "soma: unknown command '%s' (see soma --help)\n", first.c_str());
    return kExitUsage;
  }
  const std::string who = std::string("soma ") + cmd->name;
  try {
    return cmd->run(argc - 2, argv + 2);
  } catch (const UsageError& e) {
    std::cout.flush();
    std::fprintf(stderr, "%s: %s (see %s --help)\n", who.c_str(), e.what(), who.c_str());
    return kExitUsage;
  } catch (const NotAvailable& e) {
    std::cout.flush();
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    // Memory that ran out outside soma's tensor allocator (a reader's buffer, a library's
    // workspace): an error message and a failure exit, as for soma::Error.
    std::cout.flush();
    const std::size_t limit = soma::memory_limit();
    std::fprintf(stderr,
                 "%s: out of memory (std::bad_alloc) with %s in use by tensors%s%s%s\n",
                 who.c_str(), soma::detail::memory_size_str(soma::memory_in_use()).c_str(),
                 limit ? "; memory limit " : "",
                 limit ? soma::detail::memory_size_str(limit).c_str() : "",
                 limit ? "" : "; --memory-limit SIZE bounds soma's tensors");
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cout.flush();
    // One rank of a distributed run failing alone would leave the others waiting: end them all.
    if (soma::dist::world_size() > 1) soma::dist::abort(who + ": " + e.what(), kExitFailure);
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return kExitFailure;
  }
}
