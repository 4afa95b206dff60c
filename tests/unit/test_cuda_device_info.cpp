// What `soma info` reads: soma::cuda::device_properties, the driver/runtime/cuDNN versions and
// their formatting. The formatting and the no-GPU answers are checked everywhere; the device
// fields need a GPU.
#include <gtest/gtest.h>

#include <string>

#include "soma/cuda.hpp"
#include "soma/soma.hpp"

using namespace soma;

TEST(CudaDeviceInfo, VersionStrings) {
  EXPECT_EQ(cuda::cuda_version_str(13000), "13.0");
  EXPECT_EQ(cuda::cuda_version_str(12040), "12.4");
  EXPECT_EQ(cuda::cuda_version_str(0), "unknown");
  EXPECT_EQ(cuda::cudnn_version_str(91900), "9.19.0");  // cuDNN 9: major*10000 + minor*100 + patch
  EXPECT_EQ(cuda::cudnn_version_str(90102), "9.1.2");
  EXPECT_EQ(cuda::cudnn_version_str(8907), "8.9.7");    // cuDNN 8: major*1000 + minor*100 + patch
  EXPECT_EQ(cuda::cudnn_version_str(-1), "unknown");
}

TEST(CudaDeviceInfo, WithoutAGpuThePropertiesNameTheReason) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is here: the device test below runs instead";
  try {
    cuda::device_properties(0);
    FAIL() << "device_properties(0) answered without a usable GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cuda::unavailable_reason()), std::string::npos) << e.what();
  }
  if (!cuda::is_built()) {
    EXPECT_EQ(cuda::driver_version(), 0);
    EXPECT_EQ(cuda::runtime_version(), 0);
    EXPECT_EQ(cuda::cudnn_version(), 0);
  } else {
    EXPECT_GT(cuda::runtime_version(), 0) << "the runtime answers without a device";
  }
}

TEST(CudaDeviceInfo, CudnnVersionOrWhyNot) {
  if (!cuda::is_built()) GTEST_SKIP() << cuda::unavailable_reason();
  const int v = cuda::cudnn_version();
  if (v > 0) {
    EXPECT_GE(v, 90000) << "soma's kernels are written for cuDNN 9";
    EXPECT_TRUE(cuda::cudnn_load_error().empty());
  } else {
    EXPECT_NE(cuda::cudnn_load_error().find("cannot load cuDNN"), std::string::npos)
        << cuda::cudnn_load_error();
  }
}

TEST(CudaDeviceInfo, PropertiesOfEveryDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason();
  EXPECT_GT(cuda::driver_version(), 0);
  EXPECT_GT(cuda::runtime_version(), 0);
  for (int i = 0; i < cuda::device_count(); ++i) {
    const cuda::DeviceProperties p = cuda::device_properties(i);
    EXPECT_EQ(p.index, i);
    EXPECT_FALSE(p.name.empty());
    EXPECT_GT(p.total_memory, std::size_t(1) << 30);
    EXPECT_LE(p.free_memory, p.total_memory);
    EXPECT_GE(p.major, 5);  // nothing older runs soma's sm_90 build anyway
    EXPECT_GT(p.multiprocessors, 0);
    EXPECT_EQ(p.driver_version, cuda::driver_version());
  }
  EXPECT_THROW(cuda::device_properties(cuda::device_count()), Error);
}
