// Files are written atomically and durably (docs/reliability.md, "Files"): a full disk, a
// read-only or missing directory, a file-size limit or a kill in the middle of a save never leaves
// a torn file where a good one was; the error names the path and the system's reason; no
// temporary file stays behind, and the temporaries of a killed save are removed by the next save
// to that path; output locations are checked before the first epoch.
//
// A full or read-only disk is a small tmpfs mounted for the test (root only: the tests skip
// elsewhere); the file-size limit (RLIMIT_FSIZE, EFBIG) and the kills work for any user. Children
// are this executable re-run (fork + exec) with a gtest filter and an environment variable, so
// they start clean (an OpenMP pool does not survive fork).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "soma/graph/graph.hpp"
#include "soma/image.hpp"
#include "soma/model/serialization.hpp"
#include "soma/model/tensorboard.hpp"
#include "soma/model/weights.hpp"
#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"

namespace fs = std::filesystem;
using namespace soma;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream is(p, std::ios::binary);
  std::stringstream ss;
  ss << is.rdbuf();
  return ss.str();
}

void put(const fs::path& p, const std::string& bytes) {
  std::ofstream os(p, std::ios::binary | std::ios::trunc);
  os << bytes;
}

// Files in `dir` whose name has ".tmp" in it: what a save may leave behind.
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos) out.push_back(e.path());
  return out;
}

using soma::testing::error_of;

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("soma_files_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Removes a test's directory however the test ends.
struct RemoveAll {
  fs::path dir;
  ~RemoveAll() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// A tmpfs of `size` mounted on a fresh directory for the test's lifetime (needs root).
class SmallDisk {
 public:
  explicit SmallDisk(const std::string& size) : size_(size) {
    dir_ = fresh_dir("disk");
    mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  bool mounted() const { return mounted_; }
  const fs::path& dir() const { return dir_; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  bool remount_read_only() {
    return ::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, ("size=" + size_).c_str()) == 0;
  }
  // Takes every free byte: the next write of data fails with ENOSPC.
  void fill() {
    int fd = ::open((dir_ / "filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    std::string chunk(4096, 'f');
    while (::write(fd, chunk.data(), chunk.size()) > 0) {
    }
    std::string one(1, 'f');
    while (::write(fd, one.data(), 1) > 0) {
    }
    ::close(fd);
  }

 private:
  std::string size_;
  fs::path dir_;
  bool mounted_ = false;
};

#define NEED_MOUNT(disk) \
  if (!(disk).mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)"

nn::Sequential dense(int in, int out) { return nn::Sequential{nn::Input({in}), nn::Dense(out)}; }

// A model whose file is about `kib` KiB.
nn::Sequential model_of_kib(int kib) {
  const int n = int(std::sqrt(kib * 1024.0 / 4.0));
  return dense(n, n);
}

// Runs this executable again with only `filter` selected and `var`=`value` set; returns the pid.
pid_t spawn_child(const std::string& filter, const char* var, const std::string& value) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv(var, value.c_str(), 1);
    const std::string f = "--gtest_filter=" + filter;
    ::execl("/proc/self/exe", "/proc/self/exe", f.c_str(), nullptr);
    ::_exit(127);
  }
  return pid;
}

pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

// ---- a full disk: the previous file survives byte for byte, the error says why ---------------

TEST(FullDisk, ModelSaveKeepsThePreviousFileAndNamesThePath) {
  SmallDisk disk("256k");
  NEED_MOUNT(disk);
  const std::string path = disk.path("m.soma");
  dense(4, 4).save(path);
  const std::string good = slurp(path);
  const std::string e = error_of([&] { model_of_kib(400).save(path); });
  EXPECT_NE(e.find("cannot write '" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  EXPECT_TRUE(slurp(path) == good) << "the previous file changed";
  EXPECT_TRUE(temporaries(disk.dir()).empty());
}

TEST(FullDisk, CheckpointSaveKeepsThePreviousCheckpoint) {
  SmallDisk disk("256k");
  NEED_MOUNT(disk);
  const std::string path = disk.path("ckpt.soma");
  auto small = dense(4, 4);
  small.compile(optim::SGD(), nn::MeanSquaredError());
  save_checkpoint(small, path, {.epoch = 3, .rng = get_rng_state()});
  const std::string good = slurp(path);
  auto big = model_of_kib(400);
  big.compile(optim::SGD(), nn::MeanSquaredError());
  const std::string e = error_of([&] { save_checkpoint(big, path, {.epoch = 4, .rng = get_rng_state()}); });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  EXPECT_TRUE(slurp(path) == good) << "the previous file changed";
  EXPECT_EQ(load_checkpoint(path, false).state->epoch, 3);
  EXPECT_TRUE(temporaries(disk.dir()).empty());
}

TEST(FullDisk, OnnxExportKeepsThePreviousFile) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  SmallDisk disk("256k");
  NEED_MOUNT(disk);
  const std::string path = disk.path("m.onnx");
  auto small = dense(4, 4);
  onnx::export_model(small, path);
  const std::string good = slurp(path);
  auto big = model_of_kib(400);
  const std::string e = error_of([&] { onnx::export_model(big, path); });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  EXPECT_TRUE(slurp(path) == good) << "the previous file changed";
  EXPECT_TRUE(temporaries(disk.dir()).empty());
}

TEST(FullDisk, WeightsFileKeepsThePreviousFile) {
  SmallDisk disk("256k");
  NEED_MOUNT(disk);
  const std::string path = disk.path("w.bin");
  nn::write_weights_file(path, {{"a", soma::fill({4}, 1.0, DType::f32)}});
  const std::string good = slurp(path);
  const std::string e =
      error_of([&] { nn::write_weights_file(path, {{"a", soma::fill({100000}, 2.0, DType::f32)}}); });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  EXPECT_TRUE(slurp(path) == good) << "the previous file changed";
  EXPECT_TRUE(temporaries(disk.dir()).empty());
}

TEST(FullDisk, GraphSaveKeepsThePreviousFile) {
  SmallDisk disk("256k");
  NEED_MOUNT(disk);
  const std::string path = disk.path("g.graph");
  auto graph_of = [](std::int64_t n) {
    Graph g;
    GraphScope scope(g);
    Tensor x = g.placeholder(DType::f32, {-1, n}, "x");
    Tensor w = g.variable(soma::fill({n, n}, 0.5, DType::f32), "w");
    (void)matmul(x, w);
    return g;
  };
  graph_of(2).save(path);
  const std::string good = slurp(path);
  const std::string e = error_of([&] { graph_of(300).save(path); });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  EXPECT_TRUE(slurp(path) == good) << "the previous file changed";
  EXPECT_TRUE(temporaries(disk.dir()).empty());
}

TEST(FullDisk, PngKeepsThePreviousFile) {
  SmallDisk disk("64k");
  NEED_MOUNT(disk);
  const std::string path = disk.path("x.png");
  image::write_png(soma::zeros({4, 4, 1}, DType::u8), path);
  const std::string good = slurp(path);
  disk.fill();
  const std::string e = error_of([&] { image::write_png(soma::zeros({8, 8, 1}, DType::u8), path); });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  EXPECT_TRUE(slurp(path) == good) << "the previous file changed";
  EXPECT_TRUE(temporaries(disk.dir()).empty());
}

struct Xy {
  Tensor x = soma::fill({8, 3}, 0.5, DType::f32);
  Tensor y = soma::fill({8, 1}, 0.25, DType::f32);
};

nn::Sequential regression() {
  nn::Sequential m{nn::Input({3}), nn::Dense(1)};
  m.compile(optim::SGD(), nn::MeanSquaredError());
  return m;
}

TEST(FullDisk, CsvLoggerFailsNamingThePathInsteadOfWritingNothing) {
  SmallDisk disk("64k");
  NEED_MOUNT(disk);
  const std::string path = disk.path("log.csv");
  disk.fill();
  auto m = regression();
  Xy d;
  const std::string e = error_of([&] {
    m.fit(d.x, d.y, {.epochs = 2, .callbacks = {callbacks::CSVLogger(path)}, .verbose = 0});
  });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  EXPECT_TRUE(temporaries(disk.dir()).empty());
}

TEST(FullDisk, CsvLoggerKeepsTheWholeRowsAlreadyWritten) {
  SmallDisk disk("64k");
  NEED_MOUNT(disk);
  const std::string path = disk.path("log.csv");
  auto m = regression();
  Xy d;
  m.fit(d.x, d.y, {.epochs = 2, .callbacks = {callbacks::CSVLogger(path)}, .verbose = 0});
  const std::string good = slurp(path);
  ASSERT_EQ(std::count(good.begin(), good.end(), '\n'), 3) << good;
  disk.fill();
  const std::string e = error_of([&] {
    m.fit(d.x, d.y, {.epochs = 2, .callbacks = {callbacks::CSVLogger(path, ',', true)}, .verbose = 0});
  });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  EXPECT_TRUE(slurp(path) == good) << "the previous file changed";
  EXPECT_TRUE(temporaries(disk.dir()).empty());
}

TEST(FullDisk, TensorBoardEventFileReportsTheSystemError) {
  if (!tensorboard::available()) GTEST_SKIP() << "built without protobuf";
  SmallDisk disk("64k");
  NEED_MOUNT(disk);
  fs::create_directories(disk.dir() / "logs");
  disk.fill();
  const std::string e = error_of([&] { tensorboard::EventFileWriter w(disk.path("logs")); });
  EXPECT_NE(e.find("'" + disk.path("logs") + "/events.out.tfevents."), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
}

// ---- a read-only or missing directory ------------------------------------------------------

TEST(ReadOnlyDisk, ModelSaveNamesThePathAndKeepsTheFile) {
  SmallDisk disk("256k");
  NEED_MOUNT(disk);
  const std::string path = disk.path("m.soma");
  dense(4, 4).save(path);
  const std::string good = slurp(path);
  if (!disk.remount_read_only()) GTEST_SKIP() << "cannot remount read-only";
  const std::string e = error_of([&] { dense(4, 4).save(path); });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("Read-only file system"), std::string::npos) << e;
  EXPECT_TRUE(slurp(path) == good) << "the previous file changed";
}

TEST(ReadOnlyDisk, OnnxExportNamesThePathAndTheReason) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  SmallDisk disk("256k");
  NEED_MOUNT(disk);
  if (!disk.remount_read_only()) GTEST_SKIP() << "cannot remount read-only";
  auto m = dense(4, 4);
  const std::string path = disk.path("m.onnx");
  const std::string e = error_of([&] { onnx::export_model(m, path); });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("Read-only file system"), std::string::npos) << e;
}

TEST(MissingDirectory, ModelSaveNamesThePathAndTheReason) {
  const std::string path = "/nonexistent_soma_dir/sub/m.soma";
  const std::string e = error_of([&] { dense(4, 4).save(path); });
  EXPECT_NE(e.find("cannot open '" + path + "' for writing"), std::string::npos) << e;
  EXPECT_NE(e.find("No such file or directory"), std::string::npos) << e;
}

// ---- output locations are checked before the first epoch -------------------------------------

TEST(OutputCheck, ModelCheckpointInAMissingDirectoryFailsBeforeTheFirstEpoch) {
  auto m = regression();
  Xy d;
  int epochs_begun = 0;
  auto count = std::make_shared<callbacks::LambdaCallback>();
  count->on_epoch_begin_fn = [&](int, nn::Logs&) { ++epochs_begun; };
  const std::string path = "/nonexistent_soma_dir/ckpt_{epoch:02d}.soma";
  const std::string e = error_of([&] {
    m.fit(d.x, d.y, {.epochs = 1, .callbacks = {count, callbacks::ModelCheckpoint(path)}, .verbose = 0});
  });
  EXPECT_NE(e.find("ModelCheckpoint"), std::string::npos) << e;
  EXPECT_NE(e.find("/nonexistent_soma_dir"), std::string::npos) << e;
  EXPECT_NE(e.find("No such file or directory"), std::string::npos) << e;
  EXPECT_EQ(epochs_begun, 0);
}

TEST(OutputCheck, CsvLoggerInAMissingDirectoryFailsBeforeTheFirstEpoch) {
  auto m = regression();
  Xy d;
  int epochs_begun = 0;
  auto count = std::make_shared<callbacks::LambdaCallback>();
  count->on_epoch_begin_fn = [&](int, nn::Logs&) { ++epochs_begun; };
  const std::string path = "/nonexistent_soma_dir/log.csv";
  const std::string e = error_of([&] {
    m.fit(d.x, d.y, {.epochs = 1, .callbacks = {count, callbacks::CSVLogger(path)}, .verbose = 0});
  });
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_EQ(epochs_begun, 0);
}

// ---- temporaries of a killed save ------------------------------------------------------------

TEST(StaleTemporaries, ASaveRemovesThoseOfDeadProcessesOnly) {
  const auto dir = fresh_dir("stale");
  RemoveAll cleanup{dir};
  const std::string path = (dir / "m.soma").string();
  const std::string dead = std::to_string(dead_pid());
  put(path + ".tmp." + dead, "half a file");
  put(path + ".tmp." + dead + ".7", "half a file");
  put(path + ".tmp.1", "init's save, still running");  // pid 1 is alive
  put((dir / "other.soma.tmp.").string() + dead, "another file's");
  dense(4, 4).save(path);
  EXPECT_FALSE(fs::exists(path + ".tmp." + dead));
  EXPECT_FALSE(fs::exists(path + ".tmp." + dead + ".7"));
  EXPECT_TRUE(fs::exists(path + ".tmp.1"));
  EXPECT_TRUE(fs::exists((dir / "other.soma.tmp.").string() + dead));
  EXPECT_NO_THROW(load_model(path));
}

// ---- a file-size limit (EFBIG): works without root ---------------------------------------------

TEST(FileSizeChild, Saves) {
  const char* path = std::getenv("SOMA_FSIZE_CHILD");
  if (!path) GTEST_SKIP() << "only run as the child of FileSizeLimit.*";
  auto big = model_of_kib(400);
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit lim{64 * 1024, 64 * 1024};
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  const std::string e = error_of([&] { big.save(path); });
  put(std::string(path) + ".msg", e);
}

TEST(FileSizeLimit, ModelSaveBeyondTheLimitKeepsThePreviousFile) {
  const auto dir = fresh_dir("fsize");
  RemoveAll cleanup{dir};
  const std::string path = (dir / "m.soma").string();
  dense(4, 4).save(path);
  const std::string good = slurp(path);
  const pid_t pid = spawn_child("FileSizeChild.Saves", "SOMA_FSIZE_CHILD", path);
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::string e = slurp(path + ".msg");
  fs::remove(path + ".msg");
  EXPECT_NE(e.find("'" + path + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("File too large"), std::string::npos) << e;
  EXPECT_TRUE(slurp(path) == good) << "the previous file changed";
  EXPECT_TRUE(temporaries(dir).empty());
}

// ---- a kill in the middle of an ONNX export -----------------------------------------------------

TEST(ExportChild, ExportsForever) {
  const char* path = std::getenv("SOMA_EXPORT_CHILD");
  if (!path) GTEST_SKIP() << "only run as the child of Kill.*";
  auto m = load_model(std::string(path) + ".model");
  { std::ofstream(std::string(path) + ".ready") << 1; }
  for (;;) onnx::export_model(*m, path);
}

TEST(Kill, OnnxExportKilledAtRandomMomentsNeverLeavesATornFile) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  const auto dir = fresh_dir("kill");
  RemoveAll cleanup{dir};
  const std::string path = (dir / "m.onnx").string();
  auto m = model_of_kib(4096);
  m.save(path + ".model");
  onnx::export_model(m, path);
  const std::string good = slurp(path);
  ASSERT_TRUE(onnx::export_to_bytes(m) == good) << "export is not deterministic";
  std::mt19937 rng(20);
  std::uniform_int_distribution<int> delay_ms(5, 150);
  for (int round = 0; round < 6; ++round) {
    fs::remove(path + ".ready");
    const pid_t pid = spawn_child("ExportChild.ExportsForever", "SOMA_EXPORT_CHILD", path);
    ASSERT_GT(pid, 0);
    for (int i = 0; i < 3000 && !fs::exists(path + ".ready"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the exporter exited on its own: " << status;
    ASSERT_TRUE(slurp(path) == good) << "round " << round << ": torn file";
  }
  onnx::export_model(m, path);  // the next save removes what the killed ones left
  EXPECT_TRUE(temporaries(dir).empty());
}

}  // namespace
