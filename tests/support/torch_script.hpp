#pragma once
// Runs a Python script that computes reference tensors with PyTorch (Debian's python3-torch),
// for tests that compare soma's layers with torch's on fixed weights. The script gets one
// argument, the path of a text file to write: one tensor a line, "name rank d0 d1 ... values...".
// A script exits 77 when torch cannot be imported; the caller then skips.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "soma/ops.hpp"

namespace soma::testing {

struct TorchRun {
  int rc = -1;      // the script's exit status (77 or 127: no torch / no python)
  std::string log;  // what it printed
  std::map<std::string, Tensor> t;  // the tensors it wrote, as f64
  bool unavailable() const { return rc == 77 || rc == 127; }
};

// Runs `script` with SOMA_TEST_PYTHON (default `interpreter`, /usr/bin/python3 unless given) in a
// fresh folder under the temporary directory named after `tag` and the process id.
inline TorchRun run_torch_script(const char* script, const std::string& tag,
                                 const std::string& interpreter = "/usr/bin/python3") {
  namespace fs = std::filesystem;
  TorchRun run;
  const char* py = std::getenv("SOMA_TEST_PYTHON");
  const std::string python = py ? py : interpreter;
  const fs::path dir = fs::temp_directory_path() / ("soma_torch_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / (tag + ".py"), data = dir / (tag + ".txt"), log = dir / (tag + ".log");
  std::ofstream(file) << script;
  const std::string cmd = python + " '" + file.string() + "' '" + data.string() + "' > '" +
                          log.string() + "' 2>&1";
  const int s = std::system(cmd.c_str());
  run.rc = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  std::stringstream ls;
  ls << std::ifstream(log).rdbuf();
  run.log = ls.str();
  std::ifstream f(data);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string name;
    int rank = 0;
    is >> name >> rank;
    Shape shape(std::size_t(std::max(rank, 0)));
    for (auto& d : shape) is >> d;
    std::vector<double> v(std::size_t(numel(shape)));
    for (auto& x : v) is >> x;
    run.t[name] = constant(v, shape);
  }
  fs::remove_all(dir);
  return run;
}

}  // namespace soma::testing
