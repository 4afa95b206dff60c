// Distributed training over MPI, end to end: each test runs tests/dist/dist_worker under
// `mpirun -np N` (with --oversubscribe, and --allow-run-as-root as root) and checks its output,
// exit status and run time. Skips when the MPI launcher is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

Result run(const std::string& command) {
  Result r;
  const auto start = std::chrono::steady_clock::now();
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

bool have_mpirun() { return access(SOMA_MPIEXEC, X_OK) == 0; }

// `timeout` bounds every run: a hang fails the test (exit 124) instead of blocking ctest.
std::string mpirun(int np, const std::string& args, int limit_s = 60, const std::string& env = "") {
  std::string cmd = "env OMP_NUM_THREADS=1 " + env + " timeout -k 5 " + std::to_string(limit_s) +
                    " " SOMA_MPIEXEC " --oversubscribe";
  if (geteuid() == 0) cmd += " --allow-run-as-root";
  // Forward every VAR of `env` ("A=1 B=2") to the ranks.
  for (std::size_t p = 0; p < env.size();) {
    const std::size_t eq = env.find('=', p), sp = env.find(' ', p);
    if (eq == std::string::npos) break;
    cmd += " -x " + env.substr(p, eq - p);
    p = sp == std::string::npos ? env.size() : sp + 1;
  }
  return cmd + " -np " + std::to_string(np) + " " SOMA_DIST_WORKER " " + args;
}

std::string single(const std::string& args) {
  return "env OMP_NUM_THREADS=1 timeout -k 5 60 " SOMA_DIST_WORKER " " + args;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "soma_dist_" + std::to_string(getpid()) + "_" + name;
}

std::vector<double> read_values(const std::string& path) {
  std::ifstream f(path);
  std::vector<double> v;
  double x;
  while (f >> x) v.push_back(x);
  return v;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The "rank R logs: ..." line of each rank, without the rank.
std::vector<std::string> log_lines(const std::string& out, const std::string& tag) {
  std::vector<std::string> lines;
  std::size_t p = 0;
  while ((p = out.find(tag, p)) != std::string::npos) {
    const std::size_t e = out.find('\n', p);
    lines.push_back(out.substr(p, e - p));
    p = e;
  }
  return lines;
}

#define REQUIRE_MPIRUN() \
  if (!have_mpirun()) GTEST_SKIP() << "no MPI launcher at " SOMA_MPIEXEC

// NCCL needs one GPU per rank (it refuses two ranks on one device). Empty when `ranks` GPUs and
// NCCL are there, else why not (the worker asks the CUDA runtime).
std::string nccl_unavailable(int ranks) {
  Result r = run(single("gpus"));
  int gpus = 0, nccl = 0;
  const auto p = r.output.find("gpus=");
  if (r.exit_code != 0 || p == std::string::npos ||
      std::sscanf(r.output.c_str() + p, "gpus=%d nccl=%d", &gpus, &nccl) != 2)
    return "dist_worker gpus failed: " + r.output;
  if (!nccl) return "libsoma was built without NCCL";
  if (gpus == 0) return "no CUDA device";
  if (gpus < ranks)
    return "needs " + std::to_string(ranks) + " CUDA devices (one per rank), found " +
           std::to_string(gpus);
  return "";
}

#define REQUIRE_NCCL(ranks)                                         \
  REQUIRE_MPIRUN();                                                 \
  if (const std::string why = nccl_unavailable(ranks); !why.empty()) \
  GTEST_SKIP() << why

// Trains the worker's MLP on one process (plain fit, no soma::dist) and on `np` ranks; returns
// the largest weight difference.
double train_and_compare(int np, const std::string& options, Result& one, Result& many) {
  const std::string a = temp_path("one.txt"), b = temp_path("many.txt");
  one = run(single("train " + a + " --no-dist " + options));
  many = run(mpirun(np, "train " + b + " " + options));
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(many.exit_code, 0) << many.output;
  const auto wa = read_values(a), wb = read_values(b);
  EXPECT_EQ(wa.size(), 32u * 20 + 32 + 16 * 32 + 16 + 4 * 16 + 4);
  EXPECT_EQ(wa.size(), wb.size());
  std::remove(a.c_str());
  std::remove(b.c_str());
  return wa.empty() || wa.size() != wb.size() ? 1e9 : max_abs_diff(wa, wb);
}

}  // namespace

TEST(DistMpi, CollectivesGiveKnownAnswers) {
  REQUIRE_MPIRUN();
  Result r = run(mpirun(2, "comm"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("comm ok"), std::string::npos) << r.output;
}

TEST(DistMpi, TwoRanksMatchOneProcessAfter20Steps) {
  REQUIRE_MPIRUN();
  Result one, two;
  // 640 samples, global batch 64, 2 epochs: 20 steps; each rank different initial weights.
  const double diff = train_and_compare(2, "--batch 64 --samples 640 --epochs 2", one, two);
  EXPECT_LT(diff, 1e-5) << two.output;
  // Logs are averaged over the ranks: both ranks report the same, and one process the same.
  auto lines = log_lines(two.output, "logs: ");
  ASSERT_EQ(lines.size(), 2u) << two.output;
  EXPECT_EQ(lines[0], lines[1]);
  auto ref = log_lines(one.output, "logs: ");
  ASSERT_EQ(ref.size(), 1u) << one.output;
  double l1 = 0, l2 = 0;
  std::sscanf(ref[0].c_str(), "logs: loss=%lf", &l1);
  std::sscanf(lines[0].c_str(), "logs: loss=%lf", &l2);
  EXPECT_NEAR(l1, l2, 1e-5);
}

// A device model (the CPU stand-in for cuda:0, its gradients through a host-staged communicator
// in NCCL's place): the device path of fit(.distributed) -- device data cut into each rank's
// share, the broadcast and the gradient buckets routed to the device communicator -- gives the
// weights of one process after 20 steps, as on the CPU.
TEST(DistMpi, TwoRanksOnTheDeviceStandInMatchOneProcessAfter20Steps) {
  REQUIRE_MPIRUN();
  Result one, two;
  const double diff =
      train_and_compare(2, "--batch 64 --samples 640 --epochs 2 --device standin", one, two);
  EXPECT_LT(diff, 1e-5) << two.output;
  // Every parameter broadcast once, then a bucket per step at least: the device communicator
  // carried them (the world carries only the logs).
  auto lines = log_lines(two.output, "device collectives: ");
  ASSERT_EQ(lines.size(), 2u) << two.output;
  int n = 0;
  std::sscanf(lines[0].c_str(), "device collectives: %d", &n);
  EXPECT_GE(n, 6 + 20) << two.output;
}

TEST(DistMpi, DatasetFitOnTwoRanksMatchesOneProcess) {
  REQUIRE_MPIRUN();
  Result one, two;
  const double diff =
      train_and_compare(2, "--batch 64 --samples 640 --epochs 2 --dataset", one, two);
  EXPECT_LT(diff, 1e-5) << two.output;
}

TEST(DistMpi, OnlyRankZeroPrintsProgress) {
  REQUIRE_MPIRUN();
  Result r = run(mpirun(2, "train '' --batch 64 --samples 256 --epochs 2"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "Epoch 1/2"), 1u) << r.output;
  EXPECT_EQ(count(r.output, "Epoch 2/2"), 1u) << r.output;
}

TEST(DistMpi, ThreeRanksWithUnevenSharesMatchOneProcess) {
  REQUIRE_MPIRUN();
  Result one, three;
  // 64 rows per batch over 3 ranks: 21, 21 and 22; the gradients are weighted by share.
  const double diff = train_and_compare(3, "--batch 64 --samples 640 --epochs 2", one, three);
  EXPECT_LT(diff, 1e-5) << three.output;
}

TEST(DistMpi, ValidationIsSplitAndAveraged) {
  REQUIRE_MPIRUN();
  Result one, two;
  const double diff =
      train_and_compare(2, "--batch 50 --samples 300 --epochs 1 --validate", one, two);
  EXPECT_LT(diff, 1e-5);
  auto ref = log_lines(one.output, "val: "), got = log_lines(two.output, "val: ");
  ASSERT_EQ(ref.size(), 1u) << one.output;
  ASSERT_EQ(got.size(), 2u) << two.output;
  EXPECT_EQ(got[0], got[1]);
  double a1 = 0, a2 = 0, l1 = 0, l2 = 0;
  std::sscanf(ref[0].c_str(), "val: loss=%lf accuracy=%lf", &l1, &a1);
  std::sscanf(got[0].c_str(), "val: loss=%lf accuracy=%lf", &l2, &a2);
  EXPECT_NEAR(l1, l2, 1e-5);
  EXPECT_NEAR(a1, a2, 1e-9);
}

TEST(DistMpi, GradientBucketsOverlapTheBackwardPass) {
  REQUIRE_MPIRUN();
  Result r = run(mpirun(2, "overlap"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("overlap ok"), std::string::npos) << r.output;
}

// Rank -> GPU mapping: the ranks on one machine get local ranks 0..n-1 (then cuda(local rank %
// GPUs)), from Open MPI's variables and, without them, from MPI_Comm_split_type.
TEST(DistMpi, LocalRanksNumberTheRanksOnThisMachine) {
  REQUIRE_MPIRUN();
  for (const char* mode : {"local-rank", "local-rank-split"}) {
    Result r = run(mpirun(3, mode));
    ASSERT_EQ(r.exit_code, 0) << mode << "\n" << r.output;
    for (int k = 0; k < 3; ++k) {
      const std::string line = "rank=" + std::to_string(k) + " local_rank=" + std::to_string(k) +
                               " local_size=3 device=";
      EXPECT_NE(r.output.find(line), std::string::npos) << mode << ": no '" << line << "'\n"
                                                        << r.output;
    }
  }
}

TEST(DistMpi, KilledRankEndsTheJobWithinBoundedTime) {
  REQUIRE_MPIRUN();
  // Rank 1 is SIGKILLed at step 5; the launcher notices and ends rank 0 (no hang).
  Result r = run(mpirun(2, "train '' --samples 6400 --epochs 1 --rank1 die", 60));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung until the timeout:\n" << r.output;
  EXPECT_LT(r.seconds, 50.0);
  EXPECT_NE(r.output.find("signal 9"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0 logs"), std::string::npos) << "rank 0 finished?\n" << r.output;
}

TEST(DistMpi, StalledRankTimesOutWithClearError) {
  REQUIRE_MPIRUN();
  // Rank 1 stops taking part (sleeps) at step 5: rank 0's all-reduce gives up after 2 s and
  // aborts the job, naming the reason.
  Result r = run(mpirun(2, "train '' --samples 6400 --epochs 1 --rank1 stall", 60,
                     "SOMA_DIST_TIMEOUT=2"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung until the timeout:\n" << r.output;
  EXPECT_LT(r.seconds, 50.0);
  EXPECT_NE(r.output.find("rank 0 of 2 waited 2 s for the all-reduce"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("another rank has died, hangs"), std::string::npos) << r.output;
}

TEST(DistMpi, StalledRankOfADeviceModelTimesOutWithClearError) {
  REQUIRE_MPIRUN();
  // The same on the device path (the CPU stand-in device, its buckets through the host-staged
  // communicator in NCCL's place, non-blocking and polled as NCCL's are).
  Result r = run(mpirun(2, "train '' --samples 6400 --epochs 1 --rank1 stall --device standin", 60,
                     "SOMA_DIST_TIMEOUT=2"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung until the timeout:\n" << r.output;
  EXPECT_LT(r.seconds, 50.0);
  EXPECT_NE(r.output.find("rank 0 of 2 waited 2 s for the all-reduce"), std::string::npos)
      << r.output;
}

TEST(DistMpi, StalledBlockingCollectiveEndsTheJob) {
  REQUIRE_MPIRUN();
  // Blocking collectives cannot be interrupted: a watchdog ends the waiting rank after 2 s.
  Result r = run(mpirun(2, "stall-blocking", 60, "SOMA_DIST_TIMEOUT=2"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung until the timeout:\n" << r.output;
  EXPECT_LT(r.seconds, 50.0);
  EXPECT_NE(r.output.find("rank 0 of 2 waited 2 s for the all-reduce (sum) of 4 values of f32 "
                          "to complete; another rank has died"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
}

TEST(DistMpi, RanksWithDifferentDataAreStopped) {
  REQUIRE_MPIRUN();
  Result r = run(mpirun(2, "train '' --samples 256 --epochs 1 --rank1-other-data", 60));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung until the timeout:\n" << r.output;
  EXPECT_NE(r.output.find("fit: the ranks see different first batches"), std::string::npos)
      << r.output;
}

TEST(DistMpi, RankThatThrowsAbortsTheJob) {
  REQUIRE_MPIRUN();
  Result r = run(mpirun(2, "train '' --samples 6400 --epochs 1 --rank1 throw", 60));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung until the timeout:\n" << r.output;
  EXPECT_LT(r.seconds, 50.0);
  EXPECT_NE(r.output.find("rank 1: dist_worker: rank 1 gives up at step 5"), std::string::npos)
      << r.output;
}

#if defined(SOMA_CLI) && defined(SOMA_CLI_FIXTURES)
TEST(DistMpi, CliTrainDistributedSavesOnceFromRankZero) {
  REQUIRE_MPIRUN();
  const std::string dir = temp_path("cli");
  ASSERT_EQ(run("rm -rf '" + dir + "' && mkdir -p '" + dir + "' && " SOMA_CLI_FIXTURES " '" +
                dir + "'").exit_code, 0);
  std::string cmd = mpirun(2, "");
  cmd.replace(cmd.find(SOMA_DIST_WORKER), std::string(SOMA_DIST_WORKER).size(), SOMA_CLI);
  Result r = run(cmd + "train --distributed --model mlp --epochs 1 --batch-size 32 --seed 1 "
                 "--threads 1 --verbose 2 --data idx:'" + dir + "' --out '" + dir + "/m.soma'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "Epoch 1/1"), 1u) << r.output;
  EXPECT_EQ(count(r.output, "test_accuracy="), 1u) << r.output;
  EXPECT_EQ(access((dir + "/m.soma").c_str(), R_OK), 0) << "no model file";
  run("rm -rf '" + dir + "'");
}
#endif

// ---- NCCL (CUDA tensors, one process per GPU) ---------------------------------------------------

TEST(DistNccl, CollectivesOnDeviceTensorsEqualMpi) {
  REQUIRE_NCCL(2);
  Result r = run(mpirun(2, "nccl-comm", 120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nccl comm ok"), std::string::npos) << r.output;
}

TEST(DistNccl, TwoRanksOnGpusMatchOneGpuAfter20Steps) {
  REQUIRE_NCCL(2);
  Result one, two;
  const double diff =
      train_and_compare(2, "--batch 64 --samples 640 --epochs 2 --device cuda", one, two);
  EXPECT_LT(diff, 1e-5) << two.output;
  auto lines = log_lines(two.output, "logs: ");
  ASSERT_EQ(lines.size(), 2u) << two.output;
  EXPECT_EQ(lines[0], lines[1]);
}

TEST(DistNccl, StalledRankTimesOutWithClearError) {
  REQUIRE_NCCL(2);
  // Rank 1 never joins: rank 0 polls the collective's event, aborts the NCCL communicator after
  // 2 s and throws naming the operation; dist::abort then ends the job.
  Result r = run(mpirun(2, "nccl-stall", 90, "SOMA_DIST_TIMEOUT=2"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung until the timeout:\n" << r.output;
  EXPECT_NE(r.output.find("rank 0 of 2 waited 2 s for the all-reduce (sum) of 4 values of f32 on "
                          "cuda:"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("(NCCL) to complete; another rank has died"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
}

TEST(DistNccl, AskingForNcclWithoutAGpuStopsEveryRankWithTheReason) {
  REQUIRE_MPIRUN();
  if (nccl_unavailable(1).empty()) GTEST_SKIP() << "a GPU and NCCL are here: nothing to refuse";
  Result r = run(mpirun(2, "comm", 60, "SOMA_DIST_BACKEND=nccl"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung until the timeout:\n" << r.output;
  EXPECT_TRUE(r.output.find("dist.init: backend \"nccl\" needs a usable CUDA device") !=
                  std::string::npos ||
              r.output.find("dist.init: backend \"nccl\" was asked for, but libsoma was built "
                            "without NCCL") != std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("comm ok"), std::string::npos) << r.output;
}
