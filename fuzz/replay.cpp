// Replays files through the fuzz targets without libFuzzer: the regression test of the default
// build (crashing inputs found by fuzzing, kept in fuzz/regressions/<target>/) and the check that
// the seed corpus parses.
//
//   fuzz_replay DIR               each DIR/<target>/* must succeed or throw soma::Error
//   fuzz_replay --accept DIR      ... and must succeed (seed corpora are valid files), except
//                                 files named refuse_*, which must be refused with soma::Error
//                                 (the hostile seeds: deep nesting, huge sizes, INT_MIN values)
//
// Any other outcome aborts (a sanitizer build reports memory errors on its own).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_target.hpp"

namespace soma::fuzz {
void idx(const std::uint8_t*, std::size_t);
void cifar(const std::uint8_t*, std::size_t);
void csv(const std::uint8_t*, std::size_t);
void png(const std::uint8_t*, std::size_t);
void model_file(const std::uint8_t*, std::size_t);
void model_config(const std::uint8_t*, std::size_t);
void onnx(const std::uint8_t*, std::size_t);

const std::vector<Target>& all_targets() {
  static const std::vector<Target> t = {{"idx", idx},        {"cifar", cifar},
                                        {"csv", csv},        {"png", png},
                                        {"model_file", model_file}, {"model_config", model_config},
                                        {"onnx", onnx}};
  return t;
}
}  // namespace soma::fuzz

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  bool accept = false;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--accept") == 0) accept = true;
    else dirs.push_back(argv[i]);
  }
  if (dirs.empty()) {
    std::fprintf(stderr, "usage: fuzz_replay [--accept] DIR...\n");
    return 2;
  }
  soma::fuzz::setup();
  int failures = 0;
  for (const auto& dir : dirs) {
    for (const auto& target : soma::fuzz::all_targets()) {
      fs::path sub = fs::path(dir) / target.name;
      std::error_code ec;
      if (!fs::is_directory(sub, ec)) continue;
      std::vector<fs::path> files;
      for (auto& e : fs::directory_iterator(sub))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      int refused = 0;
      for (const auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                        std::istreambuf_iterator<char>());
        std::string msg;
        int r = soma::fuzz::run_one(target.fn, bytes.data(), bytes.size(), target.name, &msg);
        refused += r;
        const bool hostile = f.filename().string().rfind("refuse_", 0) == 0;
        if (accept && r && !hostile) {
          std::fprintf(stderr, "FAIL %s: expected to load, got: %s\n", f.c_str(), msg.c_str());
          ++failures;
        }
        if (accept && !r && hostile) {
          std::fprintf(stderr, "FAIL %s: expected a soma::Error, but it loaded\n", f.c_str());
          ++failures;
        }
        if (accept && r && hostile && msg.size() > 1000) {
          std::fprintf(stderr, "FAIL %s: a message of %zu characters (untrusted values must be cut)\n",
                       f.c_str(), msg.size());
          ++failures;
        }
      }
      std::printf("%-13s %4zu files: %4zu accepted, %4d refused with soma::Error  (%s)\n",
                  target.name, files.size(), files.size() - std::size_t(refused), refused,
                  sub.c_str());
    }
  }
  return failures ? 1 : 0;
}
