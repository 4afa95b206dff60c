// One rank of the distributed tests (tests/dist/test_dist_mpi.cpp runs it under mpirun):
//   dist_worker comm                      collectives against known answers
//   dist_worker train OUT [options]       a dense MLP on synthetic data; rank 0 writes the
//                                         final weights to OUT (one value per line)
//   dist_worker overlap                   buckets start while the backward pass still runs
//   dist_worker train OUT --rank1 die|stall|throw
//                                         rank 1 is killed / hangs / throws at step 5
//   dist_worker stall-blocking            rank 1 never joins a blocking all-reduce
//   dist_worker gpus                      prints "gpus=N nccl=0|1" (one process, no mpirun)
//   dist_worker nccl-comm                 NCCL collectives on CUDA tensors equal MPI's on CPU
//   dist_worker train OUT --device cuda   the model on dist::local_device() (NCCL with ranks)
//   dist_worker nccl-stall                rank 1 never joins an NCCL all-reduce
// Exits 0 on success; prints "FAIL: ..." and exits 1 otherwise.
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "../../src/dist/backend.hpp"
#include "../../src/internal/copy.hpp"
#include "emulated_device.hpp"
#include "soma/dist/data_parallel.hpp"
#include "soma/dist/dist.hpp"
#include "soma/soma.hpp"

using namespace soma;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: rank %d: %s\n", dist::rank(), what.c_str());
    std::fflush(stdout);
    ++failures;
  }
}

std::string option(int argc, char** argv, const std::string& name, const std::string& dflt) {
  for (int i = 0; i + 1 < argc; ++i)
    if (argv[i] == "--" + name) return argv[i + 1];
  return dflt;
}
bool flag(int argc, char** argv, const std::string& name) {
  for (int i = 0; i < argc; ++i)
    if (argv[i] == "--" + name) return true;
  return false;
}

// ---- comm ------------------------------------------------------------------------------------
int run_comm() {
  auto& c = dist::world();
  const int r = c.rank(), n = c.size();
  check(c.backend() == "mpi", "backend is '" + c.backend() + "', expected mpi");
  check(n == dist::world_size() && n == dist::launcher_world_size(), "world sizes disagree");
  // Sum over ranks of (rank + 1) * (i + 1) = (i + 1) * n (n + 1) / 2.
  Tensor a = Tensor::empty({1000}, DType::f32);
  for (int i = 0; i < 1000; ++i) a.data<float>()[i] = float((r + 1) * (i + 1));
  c.allreduce(a);
  bool ok = true;
  for (int i = 0; i < 1000; ++i) ok &= a.data<float>()[i] == float((i + 1) * n * (n + 1) / 2);
  check(ok, "allreduce sum f32");
  Tensor m = Tensor::empty({3}, DType::f64);
  for (int i = 0; i < 3; ++i) m.data<double>()[i] = r * 10.0 + i;
  Tensor mn = m.clone();
  c.allreduce(m, dist::ReduceOp::Max);
  c.allreduce(mn, dist::ReduceOp::Min);
  check(m.data<double>()[2] == (n - 1) * 10.0 + 2 && mn.data<double>()[2] == 2.0, "max/min f64");
  Tensor i64 = Tensor::empty({2}, DType::i64);
  i64.data<std::int64_t>()[0] = r;
  i64.data<std::int64_t>()[1] = std::int64_t(1) << 40;
  c.allreduce(i64);
  check(i64.data<std::int64_t>()[0] == std::int64_t(n) * (n - 1) / 2 &&
            i64.data<std::int64_t>()[1] == (std::int64_t(n) << 40),
        "allreduce i64");
  // Async: several in flight at once, completed in order.
  Tensor b1 = fill({64}, double(r + 1)), b2 = fill({1 << 16}, 2.0 * (r + 1));
  auto w1 = c.allreduce_async(b1), w2 = c.allreduce_async(b2);
  w2->wait();
  w1->wait();
  check(b1.at<float>({63}) == float(n * (n + 1) / 2) && b2.at<float>({70}) == float(n * (n + 1)),
        "allreduce_async");
  Tensor bc = fill({5}, double(r == 1 ? 7 : -1));
  c.broadcast(bc, 1);
  check(bc.at<float>({4}) == 7.0f, "broadcast from rank 1");
  c.barrier();
  // Logs averaged with weights: rank r has value r with weight r + 1.
  auto avg = dist::average_over_ranks(c, {{"v", double(r)}}, double(r + 1));
  double num = 0, den = 0;
  for (int k = 0; k < n; ++k) num += k * (k + 1.0), den += k + 1.0;
  check(std::fabs(avg.at("v") - num / den) < 1e-12, "average_over_ranks");
  // A bad tensor is refused with the reason, without a collective.
  Tensor nc = zeros({4, 4}).transpose();
  try {
    c.allreduce(nc);
    check(false, "a non-contiguous tensor was accepted");
  } catch (const Error& e) {
    check(std::string(e.what()).find("not contiguous") != std::string::npos, e.what());
  }
  if (failures == 0 && r == 0) std::printf("comm ok\n");
  return failures ? 1 : 0;
}

// ---- nccl-comm --------------------------------------------------------------------------------
// Every supported dtype and reduction through NCCL on device tensors, checked against the same
// reduction through MPI on the CPU (the reference).
int run_nccl_comm() {
  const Device dev = dist::local_device();
  if (!dev.is_cuda()) {
    std::printf("FAIL: rank %d has no CUDA device\n", dist::rank());
    return 1;
  }
  auto nccl = dist::communicator_for(dev);
  auto& mpi = dist::world();
  const int r = nccl->rank(), n = nccl->size();
  check(nccl->backend() == "nccl", "backend is '" + nccl->backend() + "', expected nccl");
  check(r == mpi.rank() && n == mpi.size(), "NCCL and MPI ranks differ");
  // Small integers (exact in every dtype), different on every rank.
  Tensor base = random_uniform({1000}, -8.0, 8.0, DType::f32, 40 + std::uint64_t(r));
  base = round(base);
  const std::pair<dist::ReduceOp, const char*> ops[] = {
      {dist::ReduceOp::Sum, "sum"}, {dist::ReduceOp::Max, "max"}, {dist::ReduceOp::Min, "min"}};
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (auto [op, name] : ops) {
      // MPI has no f16/bf16: its reference is computed in f32 (exact for these values).
      const DType ref_dt = (dt == DType::f16 || dt == DType::bf16) ? DType::f32 : dt;
      Tensor want = base.cast(ref_dt).clone();
      mpi.allreduce(want, op);
      Tensor got = base.cast(dt).to(dev);
      nccl->allreduce(got, op);
      Tensor diff = abs(got.to(Device::cpu()).cast(DType::f64) - want.cast(DType::f64));
      check(max(diff).item<double>() == 0.0,
            std::string("allreduce ") + name + " " + dtype_name(dt) + " differs from MPI");
    }
  }
  // Async: two in flight, waited for out of order; test() never blocks.
  Tensor a1 = fill({64}, double(r + 1)).to(dev), a2 = fill({1 << 20}, 2.0 * (r + 1)).to(dev);
  auto w1 = nccl->allreduce_async(a1), w2 = nccl->allreduce_async(a2);
  (void)w1->test();
  w2->wait();
  w1->wait();
  check(w1->test() && w2->test(), "test() after wait() is false");
  check(a1.to(Device::cpu()).at<float>({63}) == float(n * (n + 1) / 2) &&
            a2.to(Device::cpu()).at<float>({70000}) == float(n * (n + 1)),
        "allreduce_async");
  Tensor bc = fill({5}, double(r == n - 1 ? 7 : -1)).to(dev);
  nccl->broadcast(bc, n - 1);
  check(bc.to(Device::cpu()).at<float>({4}) == 7.0f, "broadcast from the last rank");
  nccl->barrier();
  // Refused with the reason, without a collective.
  Tensor cpu = fill({4}, 1.0);
  try {
    nccl->allreduce(cpu);
    check(false, "a CPU tensor was accepted by NCCL");
  } catch (const Error& e) {
    check(std::string(e.what()).find("the NCCL communicator works on CUDA tensors") !=
              std::string::npos,
          e.what());
  }
  Tensor dev_on_mpi = fill({4}, 1.0).to(dev);
  try {
    mpi.allreduce(dev_on_mpi);
    check(false, "a CUDA tensor was accepted by MPI");
  } catch (const Error& e) {
    check(std::string(e.what()).find("CUDA tensors go through NCCL") != std::string::npos,
          e.what());
  }
  if (failures == 0 && r == 0) std::printf("nccl comm ok\n");
  return failures ? 1 : 0;
}

// Rank 1 never joins: rank 0's NCCL all-reduce must fail after the timeout, naming the op.
int run_nccl_stall() {
  const Device dev = dist::local_device();
  auto nccl = dist::communicator_for(dev);
  Tensor t = fill({4}, 1.0).to(dev);
  if (dist::rank() == 1) std::this_thread::sleep_for(std::chrono::hours(1));
  nccl->allreduce(t);
  std::printf("FAIL: the NCCL all-reduce returned without rank 1\n");
  return 1;
}

// ---- train -----------------------------------------------------------------------------------
// Synthetic 4-class problem: 20 features, the class is the argmax of a fixed linear map.
void make_data(std::int64_t n, Tensor& x, Tensor& y) {
  x = random_normal({n, 20}, 0.0, 1.0, DType::f32, /*seed=*/7);
  Tensor w = random_normal({20, 4}, 0.0, 1.0, DType::f32, /*seed=*/8);
  y = argmax(matmul(x, w), -1);
}

// Collectives on (stand-in) device tensors through the world communicator, staged in host
// memory: what NCCL does for a real GPU, for the CPU stand-in device.
class HostStagedCommunicator : public dist::Communicator {
 public:
  explicit HostStagedCommunicator(dist::Communicator& world) : world_(world) {}
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  std::string backend() const override { return "host-staged"; }
  void allreduce(Tensor& t, dist::ReduceOp op) override {
    Tensor host = t.to(Device::cpu());
    world_.allreduce(host, op);
    soma::detail::copy_into(host.to(t.device()), t);
    ++device_collectives;
  }
  // Non-blocking as NCCL's: the host copy's MPI all-reduce is polled (with the deadline), the
  // result copied back to the device when it has completed.
  std::unique_ptr<dist::Work> allreduce_async(Tensor& t, dist::ReduceOp op) override {
    auto w = std::make_unique<Staged>();
    w->host = t.to(Device::cpu());
    w->dst = t;
    w->inner = world_.allreduce_async(w->host, op);
    ++device_collectives;
    return w;
  }
  void broadcast(Tensor& t, int root) override {
    Tensor host = t.to(Device::cpu());
    world_.broadcast(host, root);
    soma::detail::copy_into(host.to(t.device()), t);
    ++device_collectives;
  }
  void barrier() override { world_.barrier(); }
  std::chrono::milliseconds timeout() const override { return world_.timeout(); }
  bool broken() const override { return world_.broken(); }
  static inline int device_collectives = 0;

 private:
  struct Staged : dist::Work {
    Tensor host, dst;
    std::unique_ptr<dist::Work> inner;
    bool done = false;
    bool test() override {
      if (!done && inner->test()) finish();
      return done;
    }
    void wait() override {
      if (done) return;
      inner->wait();
      finish();
    }
    void finish() {
      soma::detail::copy_into(host.to(dst.device()), dst);
      done = true;
    }
  };
  dist::Communicator& world_;
};

int run_train(int argc, char** argv) {
  const std::string out = argc > 2 ? argv[2] : "";
  const bool distributed = !flag(argc, argv, "no-dist");
  const std::int64_t batch = std::stoll(option(argc, argv, "batch", "64"));
  const std::int64_t samples = std::stoll(option(argc, argv, "samples", "640"));
  const int epochs = std::stoi(option(argc, argv, "epochs", "2"));
  const std::int64_t bucket = std::stoll(option(argc, argv, "bucket", "4096"));
  const std::string die = option(argc, argv, "rank1", "");  // die | stall | throw
  // --device standin: the model and data on the CPU stand-in for cuda:0, its gradients through a
  // host-staged communicator in NCCL's place: the device path of fit without a GPU.
  const bool standin = option(argc, argv, "device", "cpu") == "standin";
  std::optional<soma::testing::EmulatedCuda> standin_device;
  if (standin) {
    standin_device.emplace();
    dist::detail::set_device_communicator_factory(
        [](dist::Communicator& world, Device) -> dist::CommunicatorRef {
          return std::make_shared<HostStagedCommunicator>(world);
        });
  }
  const bool cuda = standin || option(argc, argv, "device", "cpu") == "cuda";
  const Device dev = standin ? Device::cuda(0) : cuda ? dist::local_device() : Device::cpu();
  if (cuda && !dev.is_cuda()) fail("dist_worker", "--device cuda: no usable CUDA device");
  Tensor x, y;
  make_data(samples, x, y);
  if (flag(argc, argv, "rank1-other-data") && dist::rank() == 1) x = x + 1.0;
  // Different initial weights per rank: only the broadcast from rank 0 makes them agree.
  set_seed(100 + std::uint64_t(dist::rank()));
  nn::Sequential model{nn::Dense(32, nn::relu), nn::Dense(16, nn::tanh), nn::Dense(4)};
  if (dist::rank() != 0) model.build_for({-1, 20});
  if (cuda) {
    if (dist::rank() == 0) model.build_for({-1, 20});
    model.to(dev);
    x = x.to(dev);
    y = y.to(dev);
  }
  set_seed(100);
  model.compile(optim::SGD({.learning_rate = 0.1, .momentum = 0.9}),
                nn::SparseCategoricalCrossentropy({.from_logits = true}), {metrics::Accuracy()});
  callbacks::LambdaCallback cb;
  cb.on_train_batch_end_fn = [&](std::int64_t step, nn::Logs& logs) {
    (void)logs;
    if (dist::rank() != 1 || step != 5 || die.empty()) return;
    std::fflush(stdout);
    if (die == "die") std::raise(SIGKILL);
    if (die == "stall") std::this_thread::sleep_for(std::chrono::hours(1));
    if (die == "throw") fail("dist_worker", "rank 1 gives up at step 5");
  };
  nn::FitOptions o{.epochs = epochs, .batch_size = batch, .shuffle = true};
  o.seed = 5;
  o.verbose = 2;
  o.is_terminal = false;
  o.distributed = distributed;
  o.distributed_bucket_bytes = bucket;
  o.callbacks.push_back(std::make_shared<callbacks::LambdaCallback>(cb));
  if (flag(argc, argv, "validate")) o.validation_data = nn::ValidationData(x, y);
  nn::History h;
  if (flag(argc, argv, "dataset")) {  // fit(Dataset): each element is a global batch
    auto ds = data::Dataset::from_tensor_slices({x, y}).shuffle(samples, /*seed=*/9).batch(batch);
    h = model.fit(ds, o);
  } else {
    h = model.fit(x, y, o);
  }
  // Every rank reports its (averaged) logs: they must agree.
  std::printf("rank %d logs: loss=%.9g accuracy=%.9g\n", dist::rank(), h["loss"].back(),
              h["accuracy"].back());
  if (standin)
    std::printf("rank %d device collectives: %d\n", dist::rank(),
                HostStagedCommunicator::device_collectives);
  if (h.contains("val_loss"))
    std::printf("rank %d val: loss=%.9g accuracy=%.9g\n", dist::rank(), h["val_loss"].back(),
                h["val_accuracy"].back());
  if (dist::rank() == 0 && !out.empty()) {
    std::ofstream f(out);
    f.precision(9);
    for (auto& [name, v] : model.named_parameters(true))
      for (float value : v.value().to(Device::cpu()).to_vector<float>()) f << value << "\n";
  }
  return 0;
}

// ---- overlap ---------------------------------------------------------------------------------
int run_overlap() {
  auto comm = dist::world_ref();
  set_seed(3);
  nn::Sequential model{nn::Dense(64, nn::relu), nn::Dense(64, nn::relu), nn::Dense(64, nn::relu),
                       nn::Dense(4)};
  Tensor x = random_normal({16, 32}, 0.0, 1.0, DType::f32, 10 + std::uint64_t(comm->rank()));
  model.build_for({-1, 32});
  std::vector<Variable> vars = model.trainable_parameters();
  dist::GradientReducer reducer(comm, vars, {.bucket_bytes = 8 * 1024});
  check(reducer.num_buckets() > 2, "expected several buckets");
  auto loss_of = [&] { return mean(square(model(x))); };
  // Reference: the plain gradients, summed by hand with allreduce.
  std::vector<Tensor> plain;
  {
    GradientTape tape;
    Tensor l = loss_of();
    plain = tape.gradient(l, vars);
  }
  reducer.begin_step(0.5);
  std::vector<Tensor> reduced;
  {
    GradientTape tape;
    Tensor l = loss_of();
    tape.set_gradient_ready_hook(reducer.hook());
    tape.gradient(l, vars);
    reduced = reducer.finish_step();
  }
  const auto& st = reducer.stats();
  check(st.started_during_backward == st.buckets,
        "not every bucket started inside the backward pass");
  check(st.gradients_pending_at_first_start > 0,
        "the first bucket started only after the last gradient: no overlap");
  for (std::size_t i = 0; i < vars.size(); ++i) {
    Tensor want = plain[i].contiguous().clone();
    comm->allreduce(want);
    Tensor diff = abs(want * 0.5 - reduced[i]);
    check(max(diff).item<double>() < 1e-6, "reduced gradient " + std::to_string(i) + " differs");
  }
  if (failures == 0 && comm->rank() == 0)
    std::printf("overlap ok: %lld buckets, %lld gradients still pending when the first started\n",
                (long long)st.buckets, (long long)st.gradients_pending_at_first_start);
  return failures ? 1 : 0;
}

// Rank 1 never joins: rank 0's blocking all-reduce must end the job after the timeout.
int run_stall_blocking() {
  Tensor t = fill({4}, 1.0);
  if (dist::rank() == 1) std::this_thread::sleep_for(std::chrono::hours(1));
  dist::world().allreduce(t);
  std::printf("FAIL: the all-reduce returned without rank 1\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    set_num_threads(1);
    // local-rank-split: without the launcher's local-rank variables, init() finds the ranks on
    // this machine with MPI_Comm_split_type.
    if (mode == "local-rank-split")
      for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                            "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_RANK",
                            "MV2_COMM_WORLD_LOCAL_SIZE"})
        unsetenv(v);
    dist::init();
    int rc = 2;
    if (mode == "comm") rc = run_comm();
    else if (mode == "train") rc = run_train(argc, argv);
    else if (mode == "overlap") rc = run_overlap();
    else if (mode == "stall-blocking") rc = run_stall_blocking();
    else if (mode == "gpus") {
      std::printf("gpus=%d nccl=%d\n", cuda::is_available() ? cuda::device_count() : 0,
                  dist::built_with_nccl() ? 1 : 0);
      rc = 0;
    } else if (mode == "nccl-comm") rc = run_nccl_comm();
    else if (mode == "nccl-stall") rc = run_nccl_stall();
    else if (mode == "local-rank" || mode == "local-rank-split") {
      std::printf("rank=%d local_rank=%d local_size=%d device=%s\n", dist::rank(),
                  dist::local_rank(), dist::local_size(), dist::local_device().str().c_str());
      rc = 0;
    }
    else std::fprintf(stderr, "usage: dist_worker comm|train OUT|overlap\n");
    dist::finalize();
    return rc;
  } catch (const std::exception& e) {
    // One rank failing alone would leave the others waiting: end the whole job.
    dist::abort(e.what());
  }
}
