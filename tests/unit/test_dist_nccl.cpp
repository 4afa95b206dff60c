// soma::dist's engine choice for CUDA tensors (NCCL) in one process, without a launcher. The
// error cases run everywhere; the tests that need NCCL and a GPU skip with the reason (a 1-rank
// NCCL communicator exercises the whole NCCL path on one GPU). The multi-rank NCCL tests are in
// tests/dist (mpirun, one GPU per rank).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "soma/dist/data_parallel.hpp"
#include "soma/dist/dist.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"

using namespace soma;

namespace {

using soma::testing::error_of;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string no_device() {
  const std::string why = cuda::unavailable_reason();
  return why.rfind("no CUDA device", 0) == 0 ? why : "no CUDA device: " + why;
}

// Empty when a 1-rank NCCL communicator can be made here, else why not.
std::string nccl_unavailable() {
  if (!dist::built_with_nccl()) return "libsoma was built without NCCL";
  if (!cuda::is_available()) return no_device();
  return "";
}

#define REQUIRE_NCCL() \
  if (const std::string why = nccl_unavailable(); !why.empty()) GTEST_SKIP() << why

// Every test starts and ends without a process group.
class DistNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    dist::finalize();
    unsetenv("SOMA_DIST_BACKEND");
  }
  void TearDown() override {
    dist::finalize();
    unsetenv("SOMA_DIST_BACKEND");
  }
};

}  // namespace

TEST_F(DistNccl, NcclWithoutMpiStillServesOneProcess) {
  // NCCL is built without MPI too (a GPU image without MPI): one process, a 1-rank communicator.
  if (!dist::built_with_nccl() || dist::built_with_mpi())
    GTEST_SKIP() << "this build has MPI, or no NCCL";
  dist::init();
  EXPECT_EQ(dist::world_size(), 1);
  EXPECT_EQ(dist::world().backend(), "local");
}

TEST_F(DistNccl, UnknownBackendIsRefused) {
  EXPECT_EQ(error_of([] { dist::init({.backend = "gloo"}); }),
            "dist.init: backend must be \"auto\", \"mpi\" or \"nccl\" (InitOptions::backend or "
            "$SOMA_DIST_BACKEND), got \"gloo\"");
  EXPECT_FALSE(dist::initialized());
  setenv("SOMA_DIST_BACKEND", "NCCL", 1);
  EXPECT_TRUE(contains(error_of([] { dist::init(); }), "got \"NCCL\""));
}

TEST_F(DistNccl, AskingForNcclWithoutGpuOrBuildGivesTheReason) {
  if (nccl_unavailable().empty()) GTEST_SKIP() << "NCCL and a GPU are here: nothing to refuse";
  const std::string msg = error_of([] { dist::init({.backend = "nccl"}); });
  if (!dist::built_with_nccl()) {
    EXPECT_TRUE(contains(msg, "dist.init: backend \"nccl\" was asked for, but libsoma was built "
                              "without NCCL"))
        << msg;
  } else {
    EXPECT_TRUE(contains(msg, "dist.init: backend \"nccl\" needs a usable CUDA device on every "
                              "rank: "))
        << msg;
    EXPECT_TRUE(contains(msg, cuda::unavailable_reason())) << msg;
  }
  EXPECT_FALSE(dist::initialized());
  // The same through the environment (how `mpirun -x SOMA_DIST_BACKEND=nccl` asks for it).
  setenv("SOMA_DIST_BACKEND", "nccl", 1);
  EXPECT_EQ(error_of([] { dist::init(); }), msg);
}

TEST_F(DistNccl, CpuTensorsUseTheWorld) {
  dist::init();
  EXPECT_EQ(dist::communicator_for(Device::cpu()), dist::world_ref());
  EXPECT_EQ(dist::local_rank(), 0);
}

TEST_F(DistNccl, OneProcessNeedsNoNcclForDeviceTensors) {
  // A single process exchanges nothing: its device tensors use the local world, GPU or not.
  dist::init();
  EXPECT_EQ(dist::communicator_for(Device::cuda(0)), dist::world_ref());
  EXPECT_EQ(dist::world().backend(), "local");
  dist::finalize();
  dist::init({.backend = "mpi"});
  EXPECT_EQ(dist::communicator_for(Device::cuda(0)), dist::world_ref());
}

TEST_F(DistNccl, CommunicatorForNeedsInit) {
  EXPECT_TRUE(contains(error_of([] { dist::communicator_for(Device::cuda(0)); }),
                       "soma::dist::init() has not been called"));
}

TEST_F(DistNccl, LocalDeviceIsTheCpuWithoutGpu) {
  dist::init();
  const Device want = cuda::is_available() ? Device::cuda(0) : Device::cpu();
  EXPECT_EQ(dist::local_device(), want);
}

// ---- with NCCL and a GPU (skipped otherwise) --------------------------------------------------

TEST_F(DistNccl, LocalCommunicatorAcceptsDeviceTensors) {
  if (!cuda::is_available()) GTEST_SKIP() << no_device();
  auto c = dist::make_local_communicator();
  Tensor t = constant<float>({1, 2, 3}).to(Device::cuda(0));
  c->allreduce(t);
  c->allreduce_async(t)->wait();
  c->broadcast(t, 0);
  EXPECT_EQ(t.to(Device::cpu()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST_F(DistNccl, OneRankNcclCollectivesKeepTheTensor) {
  REQUIRE_NCCL();
  dist::init({.backend = "nccl"});
  auto c = dist::communicator_for(dist::local_device());
  EXPECT_EQ(c->backend(), "nccl");
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(dist::world().backend(), "local");  // CPU tensors stay with the world
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    Tensor host = constant<float>({1, -2, 3, 40}).cast(dt);
    for (auto op : {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Min}) {
      Tensor t = host.to(dist::local_device());
      c->allreduce(t, op);
      EXPECT_EQ(t.to(Device::cpu()).cast(DType::f64).to_vector<double>(),
                (std::vector<double>{1, -2, 3, 40}))
          << dtype_name(dt);
    }
  }
  Tensor big = fill({1 << 20}, 3.0).to(dist::local_device());
  auto work = c->allreduce_async(big);
  work->wait();
  EXPECT_TRUE(work->test());
  c->broadcast(big, 0);
  c->barrier();
  EXPECT_EQ(big.to(Device::cpu()).at<float>({12345}), 3.0f);
}

TEST_F(DistNccl, NcclRefusesCpuAndOtherDeviceTensorsWithTheReason) {
  REQUIRE_NCCL();
  dist::init({.backend = "nccl"});
  auto c = dist::communicator_for(dist::local_device());
  Tensor cpu = fill({4}, 1.0);
  EXPECT_EQ(error_of([&] { c->allreduce(cpu); }),
            "dist.allreduce: the tensor is on cpu; the NCCL communicator works on CUDA tensors "
            "(CPU tensors go through dist::world(), MPI)");
  Tensor nc = zeros({3, 4}).to(dist::local_device()).transpose();
  EXPECT_TRUE(contains(error_of([&] { c->broadcast(nc, 0); }), "is not contiguous")) << "";
  EXPECT_TRUE(contains(error_of([&] {
                         Tensor t = fill({2}, 1.0).to(dist::local_device());
                         c->broadcast(t, 3);
                       }),
                       "dist.broadcast: root must be in [0, 1), got 3"));
  if (cuda::device_count() > 1) {
    EXPECT_TRUE(contains(error_of([] { dist::communicator_for(Device::cuda(1)); }),
                         "this rank's NCCL communicator is on cuda:0, not on cuda:1"));
  }
}

TEST_F(DistNccl, OneRankNcclFitTrainsLikePlainFitOnTheGpu) {
  REQUIRE_NCCL();
  auto train = [](bool distributed) {
    if (distributed) dist::init({.backend = "nccl"});
    set_seed(11);
    nn::Sequential m{nn::Dense(8, nn::relu), nn::Dense(3)};
    m.build_for({-1, 5});
    m.to(dist::local_device());
    m.compile(optim::Adam({.learning_rate = 0.01}),
              nn::SparseCategoricalCrossentropy({.from_logits = true}));
    Tensor x = random_normal({96, 5}, 0.0, 1.0, DType::f32, 1);
    Tensor y = argmax(matmul(x, random_normal({5, 3}, 0.0, 1.0, DType::f32, 2)), -1);
    nn::FitOptions o{.epochs = 2, .batch_size = 32};
    o.verbose = 0;
    o.seed = 3;
    o.distributed = distributed;
    o.distributed_bucket_bytes = 64;  // several buckets, several NCCL all-reduces per step
    m.fit(x.to(dist::local_device()), y.to(dist::local_device()), o);
    std::vector<float> w;
    for (auto& [n, v] : m.named_parameters(true))
      for (float f : v.value().to(Device::cpu()).to_vector<float>()) w.push_back(f);
    dist::finalize();
    return w;
  };
  const auto plain = train(false), through_nccl = train(true);
  ASSERT_EQ(plain.size(), through_nccl.size());
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(plain[i], through_nccl[i], 1e-6);
}

TEST_F(DistNccl, ReducerNeedsTheWholeModelOnOneDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << no_device();
  dist::init();
  Variable a(fill({2}, 1.0), "a"), b(fill({2}, 1.0).to(Device::cuda(0)), "b");
  EXPECT_EQ(error_of([&] { dist::GradientReducer r(dist::world_ref(), {a, b}); }),
            "dist.GradientReducer: parameter 'b' is on cuda:0 and parameter 'a' on cpu; "
            "data-parallel training needs the whole model on one device per rank");
}
