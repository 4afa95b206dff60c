// The memory budget (docs/reliability.md): an allocation that does not fit in what the process may
// still use is a soma::Error naming the tensor, never std::bad_alloc and never a kill by the OOM
// killer. The limit comes from the cgroup, /proc/meminfo, SOMA_MEMORY_LIMIT and set_memory_limit.
// Scenarios that change the process's limits (an environment variable read once, a cgroup, an
// address-space limit) run in a child: this executable again, filtered to BudgetChild.Run.
#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "../../src/internal/runtime_checks.hpp"
#include "soma/soma.hpp"
#include "rss_testing.hpp"

extern char** environ;

using namespace soma;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;

// Runs BudgetChild.Run in a new process with SOMA_BUDGET_CHILD=mode (plus `env`); its exit
// status, or 128 + the signal that ended it.
int run_child(const std::string& mode, std::vector<std::string> env = {}) {
  std::vector<std::string> envs = std::move(env);
  envs.push_back("SOMA_BUDGET_CHILD=" + mode);
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("SOMA_BUDGET_CHILD=", 0) != 0 &&
        std::string(*e).rfind("SOMA_MEMORY_LIMIT=", 0) != 0)
      envs.push_back(*e);
  std::vector<char*> envp;
  for (auto& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=BudgetChild.Run";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Child exit codes.
constexpr int kPass = 0, kNoError = 10, kWrongMessage = 11, kOtherException = 12, kSetup = 13;

int expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
  } catch (const Error& e) {
    std::fprintf(stderr, "child: soma::Error: %s\n", e.what());
    for (const auto& n : needles)
      if (std::string(e.what()).find(n) == std::string::npos) return kWrongMessage;
    return kPass;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: other exception: %s\n", e.what());
    return kOtherException;
  }
  return kNoError;
}

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A fresh directory for a fake /proc and /sys tree.
fs::path fake_root(const char* name) {
  fs::path root = fs::temp_directory_path() / (std::string("soma_budget_") + name + "_" +
                                               std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  return root;
}

}  // namespace

// ---- the limit set with set_memory_limit ----

TEST(Budget, MemoryInUseCountsLiveTensors) {
  const std::size_t before = memory_in_use();
  {
    Tensor t = Tensor::empty({4 * 1024 * 1024}, DType::f32);  // 16 MiB
    EXPECT_GE(memory_in_use(), before + 16 * kMiB);
  }
  EXPECT_EQ(memory_in_use(), before);
}

TEST(Budget, AllocationOverTheMemoryLimitIsAnErrorNamingShapeAndDtype) {
  set_memory_limit(memory_in_use() + 100 * kMiB);
  Tensor a = Tensor::empty({16, 1024, 1024}, DType::f32);  // 64 MiB: fits
  try {
    Tensor b = Tensor::empty({16, 1024, 1024}, DType::f32);  // another 64 MiB: does not
    set_memory_limit(0);
    FAIL() << "expected soma::Error";
  } catch (const Error& e) {
    set_memory_limit(0);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("allocate: cannot allocate 64.0 MiB for tensor [16, 1024, 1024] f32 on cpu: "
                       "36.0 MiB available (the memory limit of "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("set_memory_limit"), std::string::npos) << msg;
  }
}

TEST(Budget, FreeingTensorsMakesRoomUnderTheLimitAgain) {
  set_memory_limit(memory_in_use() + 100 * kMiB);
  {
    Tensor a = Tensor::empty({16, 1024, 1024}, DType::f32);
    EXPECT_THROW(Tensor::empty({16, 1024, 1024}, DType::f32), Error);
  }
  EXPECT_NO_THROW(Tensor::empty({16, 1024, 1024}, DType::f32));
  set_memory_limit(0);
}

TEST(Budget, OpsOverTheLimitFailCleanlyAndLeaveNothingAllocated) {
  Tensor x = random_normal({1024, 1024}, 0.0, 1.0, DType::f32, 1);  // 4 MiB
  set_memory_limit(memory_in_use() + 6 * kMiB);
  const std::size_t before = memory_in_use();
  EXPECT_THROW((void)concat({x, x}, 0), Error);  // 8 MiB output
  EXPECT_EQ(memory_in_use(), before);
  set_memory_limit(0);
}

TEST(Budget, ParseMemorySizeAcceptsBytesAndSuffixes) {
  EXPECT_EQ(parse_memory_size("1048576"), 1048576u);
  EXPECT_EQ(parse_memory_size("512M"), 512 * kMiB);
  EXPECT_EQ(parse_memory_size("2G"), 2048 * kMiB);
  EXPECT_EQ(parse_memory_size("1.5G"), 1536 * kMiB);
  EXPECT_EQ(parse_memory_size("64KiB"), 64u * 1024);
  EXPECT_EQ(parse_memory_size("2 GB"), 2048 * kMiB);
  EXPECT_EQ(parse_memory_size("1t"), std::size_t(1) << 40);
}

TEST(Budget, ParseMemorySizeRejectsGarbage) {
  for (const char* bad : {"", "M", "12X", "-1G", "1.5", "2GG", "lots"})
    EXPECT_THROW(parse_memory_size(bad), Error) << bad;
}

// ---- what the system can give ----

TEST(Budget, TensorLargerThanMemAvailableIsAnError) {
  const detail::SystemMemory sys = detail::read_system_memory();
  const std::size_t machine = max_allocation_bytes();  // physical memory plus swap
  if (sys.available >= machine || machine - sys.available < 256 * kMiB)
    GTEST_SKIP() << "the system's available memory is too close to its total to test between";
  // More than is available but less than the machine has: before the budget, malloc's
  // overcommit handed this out and the first touch of it brought the OOM killer. (empty only
  // reserves: nothing is touched here either way.)
  const std::int64_t n = std::int64_t((sys.available + (machine - sys.available) / 2) / 4);
  try {
    Tensor t = Tensor::empty({n}, DType::f32);
    FAIL() << "expected soma::Error for " << n * 4 << " bytes with " << sys.available
           << " available";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("allocate: cannot allocate "), std::string::npos) << msg;
    EXPECT_NE(msg.find("for tensor [" + std::to_string(n) + "] f32 on cpu: "), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(" available ("), std::string::npos) << msg;
  }
}

TEST(Budget, CgroupV2LimitLessUsageBoundsWhatIsAvailable) {
  fs::path root = fake_root("v2");
  write_file(root / "proc/meminfo", "MemTotal: 8388608 kB\nMemAvailable: 4194304 kB\n");
  write_file(root / "proc/self/cgroup", "0::/app/job\n");
  write_file(root / "sys/fs/cgroup/app/memory.max", "max\n");
  write_file(root / "sys/fs/cgroup/app/memory.current", "734003200\n");
  write_file(root / "sys/fs/cgroup/app/job/memory.max", "268435456\n");
  write_file(root / "sys/fs/cgroup/app/job/memory.current", "104857600\n");
  const auto sys = detail::read_system_memory(root.string());
  EXPECT_EQ(sys.available, 156 * kMiB);
  EXPECT_EQ(sys.why, "cgroup /app/job: memory.max 256.0 MiB, 100.0 MiB in use");
  fs::remove_all(root);
}

TEST(Budget, CgroupV1LimitIsTheFallback) {
  fs::path root = fake_root("v1");
  write_file(root / "proc/meminfo", "MemAvailable: 4194304 kB\nSwapFree: 0 kB\n");
  write_file(root / "proc/self/cgroup", "5:cpu:/\n4:memory:/batch\n0::/\n");
  write_file(root / "sys/fs/cgroup/memory/batch/memory.limit_in_bytes", "536870912\n");
  write_file(root / "sys/fs/cgroup/memory/batch/memory.usage_in_bytes", "134217728\n");
  // The root's "no limit" (PAGE_COUNTER_MAX pages) is no limit.
  write_file(root / "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  write_file(root / "sys/fs/cgroup/memory/memory.usage_in_bytes", "1073741824\n");
  const auto sys = detail::read_system_memory(root.string());
  EXPECT_EQ(sys.available, 384 * kMiB);
  EXPECT_EQ(sys.why, "cgroup /batch: memory.limit_in_bytes 512.0 MiB, 128.0 MiB in use");
  fs::remove_all(root);
}

TEST(Budget, MemAvailablePlusSwapFreeWithoutACgroupLimit) {
  fs::path root = fake_root("meminfo");
  write_file(root / "proc/meminfo",
             "MemTotal: 8388608 kB\nMemFree: 1 kB\nMemAvailable: 1048576 kB\nSwapTotal: 0 "
             "kB\nSwapFree: 524288 kB\n");
  write_file(root / "proc/self/cgroup", "0::/\n");
  const auto sys = detail::read_system_memory(root.string());
  EXPECT_EQ(sys.available, 1536 * kMiB);
  EXPECT_NE(sys.why.find("MemAvailable 1.0 GiB and SwapFree 512.0 MiB"), std::string::npos)
      << sys.why;
  fs::remove_all(root);
}

// ---- in a child process ----

TEST(Budget, SomaMemoryLimitInTheEnvironmentBoundsTensors) {
  EXPECT_EQ(run_child("env", {"SOMA_MEMORY_LIMIT=40M"}), kPass);
}

TEST(Budget, MalformedSomaMemoryLimitIsAnErrorNamingTheVariable) {
  EXPECT_EQ(run_child("env_bad", {"SOMA_MEMORY_LIMIT=lots"}), kPass);
}

TEST(Budget, AddressSpaceLimitIsAnErrorNotBadAlloc) {
  if (soma::testing::under_asan())
    GTEST_SKIP() << "ASan's allocator aborts when the address space runs out (its shadow memory "
                    "takes terabytes of it); checked in the plain build";
  EXPECT_EQ(run_child("rlimit"), kPass);
}

// A real cgroup (root with a writable cgroup v1 or v2 memory controller): the child moves itself
// into a cgroup limited to 256 MiB and fills a 512 MiB tensor. Before the budget the OOM killer
// ended it (SIGKILL); now it gets a soma::Error naming the cgroup.
TEST(Budget, TensorOverTheCgroupLimitIsAnErrorNotTheOomKiller) {
  if (soma::testing::under_asan())
    GTEST_SKIP() << "ASan's shadow memory and quarantine count against the cgroup's 256 MiB; "
                    "checked in the plain build";
  const std::string name = "soma_budget_test_" + std::to_string(::getpid());
  // Below this process's own cgroup where it can, else at the hierarchy's root.
  std::string own_v2, own_v1;
  {
    std::ifstream cg("/proc/self/cgroup");
    std::string line;
    while (std::getline(cg, line)) {
      if (line.rfind("0::", 0) == 0) own_v2 = line.substr(3);
      if (line.find(":memory:") != std::string::npos) own_v1 = line.substr(line.rfind(':') + 1);
    }
  }
  std::vector<std::pair<fs::path, std::string>> candidates = {
      {fs::path("/sys/fs/cgroup" + own_v2) / name, "memory.max"},
      {fs::path("/sys/fs/cgroup/memory" + own_v1) / name, "memory.limit_in_bytes"},
      {fs::path("/sys/fs/cgroup") / name, "memory.max"},
      {fs::path("/sys/fs/cgroup/memory") / name, "memory.limit_in_bytes"}};
  for (auto& [dir, limit_file] : candidates) {
    if (!fs::exists(dir.parent_path() / (limit_file == "memory.max" ? "cgroup.controllers"
                                                                    : "memory.limit_in_bytes")))
      continue;
    if (::mkdir(dir.c_str(), 0755) != 0) continue;
    {
      std::ofstream f(dir / limit_file);
      f << (256 * kMiB) << "\n";
      f.flush();
      if (!f || !fs::exists(dir / limit_file)) {
        ::rmdir(dir.c_str());
        continue;
      }
    }
    if (limit_file == "memory.limit_in_bytes") {
      std::ofstream(dir / "memory.memsw.limit_in_bytes") << (256 * kMiB) << "\n";
    } else {
      std::ofstream(dir / "memory.swap.max") << "0\n";
    }
    const int rc = run_child("cgroup", {"SOMA_BUDGET_CGROUP=" + (dir / "cgroup.procs").string()});
    ::rmdir(dir.c_str());
    if (rc == kSetup) continue;  // could not join (e.g. no memory controller delegated there)
    EXPECT_EQ(rc, kPass) << (rc == 128 + SIGKILL ? "the child was killed (OOM killer)" : "");
    return;
  }
  GTEST_SKIP() << "no writable cgroup memory controller here";
}

// The body of the child scenarios; a no-op in the parent.
TEST(BudgetChild, Run) {
  const char* mode_env = std::getenv("SOMA_BUDGET_CHILD");
  if (!mode_env) GTEST_SKIP() << "runs only as a child of the Budget tests";
  const std::string mode = mode_env;
  int rc = kSetup;
  if (mode == "env") {
    Tensor a = Tensor::empty({16 * 1024 * 1024 / 4}, DType::f32);  // 16 MiB: fits
    rc = expect_error([] { Tensor b = Tensor::empty({8, 1024, 1024}, DType::f32); },
                      {"cannot allocate 32.0 MiB for tensor [8, 1024, 1024] f32",
                       "the memory limit of 40.0 MiB set with SOMA_MEMORY_LIMIT"});
  } else if (mode == "env_bad") {
    rc = expect_error([] { Tensor b = Tensor::empty({8, 1024, 1024}, DType::f32); },
                      {"SOMA_MEMORY_LIMIT", "'lots' is not a memory size"});
  } else if (mode == "rlimit") {
    rlimit rl{};
    rl.rlim_cur = rl.rlim_max = 0;
    // The current address space plus 256 MiB.
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0;
    statm >> pages;
    rl.rlim_cur = rl.rlim_max = pages * ::sysconf(_SC_PAGESIZE) + 256 * kMiB;
    if (::setrlimit(RLIMIT_AS, &rl) != 0) std::_Exit(kSetup);
    rc = expect_error([] { Tensor b = Tensor::empty({1024, 1024, 1024}, DType::f32); },
                      {"cannot allocate 4.0 GiB for tensor [1024, 1024, 1024] f32 on cpu",
                       "RLIMIT_AS"});
  } else if (mode == "cgroup") {
    {
      std::ofstream procs(std::getenv("SOMA_BUDGET_CGROUP"));
      procs << ::getpid() << "\n";
      procs.flush();
      if (!procs) std::_Exit(kSetup);
    }
    rc = expect_error([] { Tensor b = zeros({128, 1024, 1024}, DType::f32); },
                      {"cannot allocate 512.0 MiB for tensor [128, 1024, 1024] f32 on cpu",
                       "cgroup /"});
  }
  std::fflush(stderr);
  std::_Exit(rc);
}
