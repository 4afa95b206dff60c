// A process saving checkpoints in a loop is killed with SIGKILL at random moments; the file at
// the checkpoint path must always load, and hold one complete checkpoint (never a mix).
//
// The writer is this same test executable re-run (fork + exec) with SOMA_CRASH_WRITER set and a
// filter selecting CrashWriter.SavesForever: exec gives the child a clean process (no inherited
// OpenMP pool, which is not fork-safe).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "soma/model/serialization.hpp"
#include "soma/soma.hpp"

namespace fs = std::filesystem;
using namespace soma;

namespace {

nn::Sequential net() {
  return nn::Sequential{nn::Input({64}), nn::Dense(256), nn::Dense(256), nn::Dense(10)};
}

// Every weight of checkpoint k is filled with the value k, so a mix of two checkpoints shows.
void fill_all(nn::Model& m, double v) {
  std::map<std::string, Tensor> w;
  for (auto& [k, t] : m.get_weights()) w[k] = soma::fill(t.shape(), v, t.dtype());
  m.set_weights(w);
}

TEST(CrashWriter, SavesForever) {
  const char* path = std::getenv("SOMA_CRASH_WRITER");
  if (!path) GTEST_SKIP() << "only run as the child of CheckpointSurvivesSigkill";
  auto m = net();
  m.compile(optim::Adam(), nn::MeanSquaredError());
  // Tells the parent that start-up is over: the random kill delay then covers saves only, not
  // exec and start-up, which take most of a second in a sanitizer build on a loaded machine.
  { std::ofstream(std::string(path) + ".ready") << 1; }
  for (int k = 1;; ++k) {
    fill_all(m, k);
    m.save(path);
  }
}

TEST(Checkpoint, SurvivesSigkillDuringSave) {
  const auto dir = fs::temp_directory_path() / ("soma_crash_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "ckpt.soma").string();
  {  // checkpoint 0 exists before the writer starts
    auto m = net();
    m.compile(optim::Adam(), nn::MeanSquaredError());
    fill_all(m, 0);
    m.save(path);
  }
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> delay_ms(30, 400);
  double last = 0;
  int advanced = 0;
  const std::string ready = path + ".ready";
  for (int round = 0; round < 8; ++round) {
    fs::remove(ready);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("SOMA_CRASH_WRITER", path.c_str(), 1);
      ::execl("/proc/self/exe", "/proc/self/exe", "--gtest_filter=CrashWriter.SavesForever", nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 3000 && !fs::exists(ready); ++i)  // up to 30 s
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "writer exited on its own";

    std::shared_ptr<nn::Model> m;
    ASSERT_NO_THROW(m = load_model(path)) << "round " << round;
    ASSERT_TRUE(m->compiled());
    // One complete checkpoint: every weight holds the same value.
    double v = -1;
    for (auto& [k, t] : m->get_weights()) {
      const double lo = soma::min(t).item<double>(), hi = soma::max(t).item<double>();
      ASSERT_EQ(lo, hi) << k;
      if (v < 0) v = lo;
      ASSERT_EQ(lo, v) << k;
    }
    if (v != last) ++advanced;
    last = v;
    for (auto& e : fs::directory_iterator(dir))  // leftovers of the killed save
      if (e.path().string().find(".tmp.") != std::string::npos) fs::remove(e.path());
  }
  EXPECT_GT(advanced, 0) << "the writer never completed a checkpoint";
  fs::remove_all(dir);
}

}  // namespace
