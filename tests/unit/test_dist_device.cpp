// Data-parallel training of a model on a device, without a GPU: the gradient reducer's buckets
// for device tensors on the CPU stand-in device (tests/support/emulated_device.hpp), reduced by a
// communicator that stands in for NCCL (it sums as `ranks` identical ranks would, with ops on
// the tensors' device), and the check NCCL's setup makes that no two ranks share a GPU. The NCCL
// communicator itself runs in test_dist_nccl (one GPU) and tests/dist (two).
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "../../src/dist/backend.hpp"
#include "../../src/internal/copy.hpp"
#include "emulated_device.hpp"
#include "soma/dist/data_parallel.hpp"
#include "soma/dist/dist.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::rand_tensor;

namespace {

class DoneWork : public dist::Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

// `ranks` ranks that hold the same gradients: an all-reduce (sum) multiplies by `ranks`. Records
// where each collective's tensor lives, its size, and how many gradients the backward pass had
// still to report when it started (`pending` is read through the pointer the test sets).
class StandInDeviceComm : public dist::Communicator {
 public:
  struct Call {
    Device device;
    std::int64_t numel;
    std::int64_t pending;
  };
  explicit StandInDeviceComm(int ranks) : ranks_(ranks) {}
  int rank() const override { return 0; }
  int size() const override { return ranks_; }
  std::string backend() const override { return "stand-in"; }
  void allreduce(Tensor& t, dist::ReduceOp) override {
    calls.push_back({t.device(), t.numel(), pending ? *pending : -1});
    NoGradScope no_grad;
    soma::detail::copy_into(t * double(ranks_), t);
  }
  std::unique_ptr<dist::Work> allreduce_async(Tensor& t, dist::ReduceOp op) override {
    allreduce(t, op);
    return std::make_unique<DoneWork>();
  }
  void broadcast(Tensor& t, int) override { calls.push_back({t.device(), t.numel(), -1}); }
  void barrier() override {}
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1000); }
  bool broken() const override { return false; }

  std::vector<Call> calls;
  const std::int64_t* pending = nullptr;

 private:
  int ranks_;
};

std::shared_ptr<nn::Sequential> mlp() {
  set_seed(3);
  auto m = std::make_shared<nn::Sequential>(nn::Input({12}), nn::Dense(32, nn::relu),
                                            nn::Dense(16, nn::relu), nn::Dense(4));
  return m;
}

// One step of the reducer over `model` on `comm`: the reduced gradients, on the host.
std::vector<Tensor> reduce_one_step(nn::Sequential& model, StandInDeviceComm& comm,
                                    const Tensor& x, const Tensor& y, double weight,
                                    std::int64_t bucket_bytes, std::int64_t* pending_out) {
  std::vector<Variable> vars = model.trainable_parameters();
  auto handle = std::shared_ptr<dist::Communicator>(&comm, [](dist::Communicator*) {});
  dist::GradientReducer reducer(handle, vars, {.bucket_bytes = bucket_bytes});
  std::int64_t pending = std::int64_t(vars.size());
  comm.pending = &pending;
  reducer.begin_step(weight);
  GradientTape tape;
  Tensor loss = nn::MeanSquaredError()(y, model(x));
  auto hook = reducer.hook();
  tape.set_gradient_ready_hook([&](std::size_t i, const Tensor& g) {
    --pending;
    hook(i, g);
  });
  tape.gradient(loss, vars);
  std::vector<Tensor> out = reducer.finish_step();
  comm.pending = nullptr;
  if (pending_out) *pending_out = pending;
  std::vector<Tensor> host;
  for (auto& t : out) host.push_back(t.to(Device::cpu()));
  return host;
}

}  // namespace

TEST(DistDevice, BucketsOfDeviceGradientsStayOnTheDeviceAndMatchTheCpu) {
  const Tensor x = rand_tensor({8, 12}, 1).cast(DType::f32);
  const Tensor y = rand_tensor({8, 4}, 2).cast(DType::f32);
  // The CPU reducer's plan and result, as the reference.
  auto cpu_model = mlp();
  StandInDeviceComm cpu_comm(2);
  const auto want = reduce_one_step(*cpu_model, cpu_comm, x, y, 0.5, 1024, nullptr);

  soma::testing::EmulatedCuda gpu;
  auto dev_model = mlp();
  dev_model->to(gpu.device());
  const Tensor xd = x.to(gpu.device()), yd = y.to(gpu.device());
  StandInDeviceComm dev_comm(2);
  cuda::reset_transfer_stats();
  std::vector<Tensor> got;
  {
    // Count only the step itself: the results' copies back come after.
    std::vector<Variable> vars = dev_model->trainable_parameters();
    auto handle = std::shared_ptr<dist::Communicator>(&dev_comm, [](dist::Communicator*) {});
    dist::GradientReducer reducer(handle, vars, {.bucket_bytes = 1024});
    std::int64_t pending = std::int64_t(vars.size());
    dev_comm.pending = &pending;
    reducer.begin_step(0.5);
    GradientTape tape;
    Tensor loss = nn::MeanSquaredError()(yd, (*dev_model)(xd));
    auto hook = reducer.hook();
    tape.set_gradient_ready_hook([&](std::size_t i, const Tensor& g) {
      --pending;
      hook(i, g);
    });
    tape.gradient(loss, vars);
    std::vector<Tensor> out = reducer.finish_step();
    const auto st = cuda::transfer_stats();
    EXPECT_EQ(st.host_to_device_copies, 0u) << "a bucket or a scale went through the host";
    EXPECT_EQ(st.device_to_host_copies, 0u) << "a gradient was read back during the step";
    for (auto& t : out) {
      EXPECT_EQ(t.device(), gpu.device());
      got.push_back(t.to(Device::cpu()));
    }
    EXPECT_GT(reducer.stats().gradients_pending_at_first_start, 0)
        << "the first bucket started after the backward pass: no overlap";
  }
  // The same buckets (sizes, order) as on the CPU, every one a device tensor.
  ASSERT_EQ(dev_comm.calls.size(), cpu_comm.calls.size());
  ASSERT_GT(dev_comm.calls.size(), 1u) << "expected several buckets of 1 KiB";
  for (std::size_t k = 0; k < dev_comm.calls.size(); ++k) {
    EXPECT_EQ(dev_comm.calls[k].device, gpu.device()) << "bucket " << k;
    EXPECT_EQ(dev_comm.calls[k].numel, cpu_comm.calls[k].numel) << "bucket " << k;
  }
  EXPECT_GT(dev_comm.calls[0].pending, 0) << "the first bucket waited for the whole backward pass";
  // 2 identical ranks, each weighted 0.5: the local gradient, as on the CPU.
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(soma::testing::all_close(got[i], want[i], 1e-6, 1e-6)) << "gradient " << i;
}

TEST(DistDevice, InitialWeightsBroadcastGoesToTheDeviceCommunicator) {
  soma::testing::EmulatedCuda gpu;
  auto m = mlp();
  m->to(gpu.device());
  StandInDeviceComm comm(2);
  std::vector<Tensor> values;
  for (auto& v : m->trainable_parameters()) values.push_back(v.value());
  cuda::reset_transfer_stats();
  dist::broadcast_parameters(comm, values);
  EXPECT_EQ(comm.calls.size(), values.size());
  for (auto& c : comm.calls) EXPECT_EQ(c.device, gpu.device());
  EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 0u);
}

TEST(DistDevice, DistributedFitOfADeviceModelOnOneProcessTrainsLikePlainFit) {
  // World size 1: fit(.distributed) routes the device model's buckets to the communicator of its
  // device (the world itself for one process) and must train exactly as plain fit on the device.
  dist::init();
  soma::testing::EmulatedCuda gpu;
  auto train = [&](bool distributed) {
    auto m = mlp();
    m->to(gpu.device());
    m->compile(optim::Adam({.learning_rate = 0.01}), nn::MeanSquaredError());
    nn::FitOptions o{.epochs = 2, .batch_size = 16, .shuffle = false};
    o.verbose = 0;
    o.distributed = distributed;
    m->fit(rand_tensor({64, 12}, 5).cast(DType::f32), rand_tensor({64, 4}, 6).cast(DType::f32), o);
    return m->state_dict();
  };
  auto plain = train(false), dist_w = train(true);
  ASSERT_EQ(plain.size(), dist_w.size());
  for (auto& [name, t] : plain)
    EXPECT_TRUE(soma::testing::all_close(dist_w.at(name), t, 0.0, 0.0)) << name;
  dist::finalize();
}

TEST(DistDevice, TwoRanksOnOneGpuAreNamedBeforeNcclSetup) {
  using Id = std::array<std::int64_t, 2>;
  // Ranks 0 and 2 on one GPU (3 ranks, 2 GPUs on the machine); rank 3 has none.
  const std::vector<Id> ids = {Id{11, 12}, Id{21, 22}, Id{11, 12}, Id{0, 0}};
  EXPECT_EQ(dist::detail::rank_sharing_gpu(ids, 0), 2);
  EXPECT_EQ(dist::detail::rank_sharing_gpu(ids, 2), 0);
  EXPECT_EQ(dist::detail::rank_sharing_gpu(ids, 1), -1);
  EXPECT_EQ(dist::detail::rank_sharing_gpu(ids, 3), -1) << "no GPU is reported otherwise";
  EXPECT_EQ(dist::detail::rank_sharing_gpu({Id{0, 0}, Id{0, 0}}, 0), -1);
  EXPECT_EQ(dist::detail::rank_sharing_gpu(ids, 7), -1);
}

TEST(DistDevice, LocalRankAndSizeOfOneProcess) {
  dist::init();
  EXPECT_EQ(dist::local_rank(), 0);
  EXPECT_EQ(dist::local_size(), 1);
  dist::finalize();
  EXPECT_EQ(dist::local_size(), 1);
}
