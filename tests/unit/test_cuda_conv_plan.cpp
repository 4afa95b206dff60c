// The CUDA convolution/pooling backend's planning and per-element logic, checked on the CPU (it
// runs in every build, GPU or not, CUDA built or not):
//   - conv_plan.hpp: for every padding mode, stride, dilation and group count the ops accept, the
//     cuDNN-side geometry (symmetric padding + explicit zero padding) gives the op's output shape
//     (get_op(...).infer), and computing with it (pad the input, convolve with the symmetric
//     padding, crop the input gradient) gives the CPU ops' results;
//   - conv_pool_index.hpp: the pooling kernels' per-element functions, run over the whole index
//     space on the host, give the CPU kernels' results bit for bit (first maximum on ties, NaN
//     propagating, padding excluded from averages), and the bias + ReLU epilogue matches
//     conv2d_bias_act.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../../src/backend/cuda/conv_plan.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::cuda_detail::ConvPlan;
using soma::cuda_detail::PoolDims;
using soma::cuda_detail::WindowCopy;
using soma::testing::all_close;
using soma::testing::rand_tensor;
using Ints = std::vector<std::int64_t>;

namespace {

Attrs conv_attrs(const Ints& st, const Ints& pads, const Ints& dil, std::int64_t groups) {
  return {{"strides", st}, {"pads", pads}, {"dilation", dil}, {"groups", groups}};
}
Attrs pool_attrs(const Ints& pool, const Ints& st, const Ints& pads) {
  return {{"pool", pool}, {"strides", st}, {"pads", pads}};
}

std::string conv_case(const Shape& x, const Shape& w, const Ints& st, const Ints& pads,
                      const Ints& dil, std::int64_t groups) {
  return "x " + shape_str(x) + " w " + shape_str(w) + " strides " + shape_str(st) + " pads " +
         shape_str(pads) + " dilation " + shape_str(dil) + " groups " + std::to_string(groups);
}

// The host run of a window copy (the CUDA kernel's per-element function) on a packed tensor.
Tensor window_copy(const Tensor& in, const WindowCopy& c, const Shape& out_shape) {
  EXPECT_EQ(in.dtype(), DType::f64);
  Tensor src = in.contiguous();
  Tensor out = Tensor::empty(out_shape, DType::f64);
  const auto* s = reinterpret_cast<const std::uint64_t*>(src.data<double>());
  auto* d = reinterpret_cast<std::uint64_t*>(out.data<double>());
  for (std::int64_t i = 0; i < out.numel(); ++i) d[i] = cuda_detail::window_copy_at(s, c, i);
  return out;
}

// Equal values, NaN where the other is NaN, and the same sign of zero.
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && (got[i] != want[i] || std::signbit(got[i]) != std::signbit(want[i])))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want "
                                           << want[i];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

// ---- conv_plan.hpp: shapes --------------------------------------------------------------------
TEST(CudaConvPlan, OutputShapeAgreesWithTheInferRuleForEveryPaddingStrideAndDilation) {
  const OpDef& conv = get_op("conv2d");
  const OpDef& bpi = get_op("conv2d_backprop_input");
  const OpDef& bpf = get_op("conv2d_backprop_filter");
  const std::vector<Padding> paddings = {Padding("valid"), Padding("same"), Padding(1),
                                         Padding(0, 1, 2, 0), Padding(2, 1, 0, 3)};
  int checked = 0, asymmetric = 0;
  for (std::int64_t h : {1, 2, 3, 5, 8})
    for (std::int64_t w : {1, 4, 7})
      for (std::int64_t kh : {1, 2, 3, 5})
        for (std::int64_t kw : {1, 3, 4})
          for (std::int64_t sh : {1, 2, 3})
            for (std::int64_t sw : {1, 2})
              for (std::int64_t dh : {1, 2})
                for (std::int64_t dw : {1, 3})
                  for (const Padding& pad : paddings) {
                    const auto pa = resolve_padding(pad, h, w, {kh, kw}, {sh, sw}, {dh, dw});
                    const Ints pads(pa.begin(), pa.end()), st{sh, sw}, dil{dh, dw};
                    const Shape xs{2, 3, h, w}, ws{4, 3, kh, kw};
                    const Attrs a = conv_attrs(st, pads, dil, 1);
                    Shape y;
                    try {
                      y = conv.infer({{xs, DType::f32}, {ws, DType::f32}}, a)[0].shape;
                    } catch (const Error&) {
                      continue;  // the window is larger than the padded input: the op refuses
                    }
                    const ConvPlan p = cuda_detail::plan_conv(xs, ws, st, pads, dil, 1);
                    const std::string what = conv_case(xs, ws, st, pads, dil, 1);
                    ASSERT_EQ(Shape({p.n, p.o, p.oh, p.ow}), y) << what;
                    // Symmetric for cuDNN, the rest explicit, none dropped.
                    EXPECT_EQ(p.pad_h + p.extra_top, pads[0]) << what;
                    EXPECT_EQ(p.pad_h + p.extra_bottom, pads[1]) << what;
                    EXPECT_EQ(p.pad_w + p.extra_left, pads[2]) << what;
                    EXPECT_EQ(p.pad_w + p.extra_right, pads[3]) << what;
                    EXPECT_TRUE(p.extra_top >= 0 && p.extra_bottom >= 0 && p.extra_left >= 0 &&
                                p.extra_right >= 0)
                        << what;
                    EXPECT_TRUE(p.extra_top == 0 || p.extra_bottom == 0) << what;
                    EXPECT_TRUE(p.extra_left == 0 || p.extra_right == 0) << what;
                    EXPECT_EQ(p.hp, h + p.extra_top + p.extra_bottom) << what;
                    EXPECT_EQ(p.wp, w + p.extra_left + p.extra_right) << what;
                    EXPECT_EQ(p.explicit_padding(), pads[0] != pads[1] || pads[2] != pads[3])
                        << what;
                    asymmetric += p.explicit_padding();
                    // The padded geometry is a valid convolution with the same output, and the
                    // gradient ops accept the plan's shapes.
                    const Attrs sym = conv_attrs(st, {p.pad_h, p.pad_h, p.pad_w, p.pad_w}, dil, 1);
                    EXPECT_EQ(conv.infer({{Shape{p.n, p.c, p.hp, p.wp}, DType::f32},
                                          {ws, DType::f32}},
                                         sym)[0]
                                  .shape,
                              y)
                        << what;
                    EXPECT_EQ(bpi.infer({{y, DType::f32}, {ws, DType::f32}},
                                        Attrs(a).set("input_shape", Ints(xs)))[0]
                                  .shape,
                              xs)
                        << what;
                    EXPECT_EQ(bpf.infer({{xs, DType::f32}, {y, DType::f32}},
                                        Attrs(a).set("filter_shape", Ints(ws)))[0]
                                  .shape,
                              ws)
                        << what;
                    ++checked;
                  }
  EXPECT_GT(checked, 10000);
  EXPECT_GT(asymmetric, 1000);  // "same" with an odd total, and the explicit asymmetric cases
}

TEST(CudaConvPlan, GroupsAndChannelsPassThrough) {
  const OpDef& conv = get_op("conv2d");
  for (std::int64_t groups : {1, 2, 3, 6}) {
    const Shape xs{3, 6, 9, 8}, ws{12, 6 / groups, 3, 2};
    const Ints st{2, 3}, dil{1, 2}, pads{1, 0, 2, 1};
    const Shape y =
        conv.infer({{xs, DType::f64}, {ws, DType::f64}}, conv_attrs(st, pads, dil, groups))[0]
            .shape;
    const ConvPlan p = cuda_detail::plan_conv(xs, ws, st, pads, dil, groups);
    EXPECT_EQ(Shape({p.n, p.o, p.oh, p.ow}), y) << groups;
    EXPECT_EQ(p.groups, groups);
    EXPECT_EQ(p.c / p.groups, ws[1]);  // the filter descriptor's channels
  }
}

TEST(CudaConvPlan, PoolShapeAgreesWithTheInferRule) {
  const OpDef& mp = get_op("max_pool2d");
  int checked = 0;
  for (std::int64_t h : {1, 2, 5, 8})
    for (std::int64_t w : {1, 3, 6})
      for (std::int64_t ph : {1, 2, 3})
        for (std::int64_t pw : {1, 2, 3})
          for (std::int64_t sh : {1, 2, 3})
            for (std::int64_t sw : {1, 2})
              for (const Padding& pad : {Padding("valid"), Padding("same"), Padding(0, 1, 1, 0)}) {
                Ints pads;
                try {
                  const auto pa = resolve_padding(pad, h, w, {ph, pw}, {sh, sw});
                  pads.assign(pa.begin(), pa.end());
                  const Shape xs{2, 3, h, w};
                  const Attrs a = pool_attrs({ph, pw}, {sh, sw}, pads);
                  const Shape y = mp.infer({{xs, DType::f32}}, a)[0].shape;
                  const PoolDims p = cuda_detail::plan_pool(xs, {ph, pw}, {sh, sw}, pads);
                  EXPECT_EQ(Shape({2, 3, p.oh, p.ow}), y) << shape_str(xs) << shape_str(pads);
                  EXPECT_EQ(p.planes, 6);
                  ++checked;
                } catch (const Error&) {
                  continue;  // the op refuses this window/padding
                }
              }
  EXPECT_GT(checked, 500);
}

// ---- conv_plan.hpp: computing with the plan gives the op's result ------------------------------
// What the CUDA kernels do around cuDNN, with the CPU ops standing in for cuDNN: convolve the
// explicitly padded input with symmetric padding, crop the padded input's gradient.
TEST(CudaConvPlan, ExplicitPaddingGivesTheAsymmetricConvolution) {
  struct Case {
    Shape x, w;
    Ints st, pads, dil;
    std::int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 4, 6, 7}, {6, 2, 3, 2}, {2, 1}, {1, 0, 1, 1}, {1, 2}, 2},  // the op's test sample
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {2, 2}, {0, 1, 0, 1}, {1, 1}, 1},  // "same", stride 2
      {{2, 2, 5, 9}, {3, 2, 4, 2}, {1, 3}, {2, 1, 0, 3}, {1, 1}, 1},
      {{1, 4, 7, 5}, {4, 1, 2, 3}, {3, 2}, {0, 2, 2, 0}, {2, 1}, 4},  // depthwise
      {{1, 1, 4, 4}, {1, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},  // symmetric: no copy
  };
  for (const Case& k : cases) {
    const std::string what = conv_case(k.x, k.w, k.st, k.pads, k.dil, k.groups);
    const Attrs a = conv_attrs(k.st, k.pads, k.dil, k.groups);
    const ConvPlan p = cuda_detail::plan_conv(k.x, k.w, k.st, k.pads, k.dil, k.groups);
    const Attrs sym = conv_attrs(k.st, {p.pad_h, p.pad_h, p.pad_w, p.pad_w}, k.dil, k.groups);
    const Shape xp_shape{p.n, p.c, p.hp, p.wp};
    const Tensor x = rand_tensor(k.x, 1), w = rand_tensor(k.w, 2);
    const Tensor xp = window_copy(x, p.pad_input(), xp_shape);

    const Tensor y = call_op1(get_op("conv2d"), {x, w}, a);
    ASSERT_EQ(y.shape(), Shape({p.n, p.o, p.oh, p.ow})) << what;
    EXPECT_TRUE(all_close(call_op1(get_op("conv2d"), {xp, w}, sym), y, 1e-12, 1e-12)) << what;

    const Tensor g = rand_tensor(y.shape(), 3);
    const Tensor dx = call_op1(get_op("conv2d_backprop_input"), {g, w},
                               Attrs(a).set("input_shape", Ints(k.x)));
    const Tensor dxp = call_op1(get_op("conv2d_backprop_input"), {g, w},
                                Attrs(sym).set("input_shape", Ints(xp_shape)));
    EXPECT_TRUE(all_close(window_copy(dxp, p.crop_input(), k.x), dx, 1e-12, 1e-12)) << what;

    const Tensor dw = call_op1(get_op("conv2d_backprop_filter"), {x, g},
                               Attrs(a).set("filter_shape", Ints(k.w)));
    EXPECT_TRUE(all_close(call_op1(get_op("conv2d_backprop_filter"), {xp, g},
                                   Attrs(sym).set("filter_shape", Ints(k.w))),
                          dw, 1e-12, 1e-12))
        << what;
  }
}

TEST(CudaConvPlan, WindowCopyPadsWithZerosAndCropsBack) {
  const Tensor x = rand_tensor({2, 3, 4, 5}, 4);
  const WindowCopy pad{6, 4, 5, 7, 6, -2, -1};  // 2 rows before, 1 after; 1 column before
  const Tensor xp = window_copy(x, pad, {2, 3, 7, 6});
  const auto v = xp.to_vector<double>();
  const auto src = x.to_vector<double>();
  for (std::int64_t pl = 0; pl < 6; ++pl)
    for (std::int64_t y = 0; y < 7; ++y)
      for (std::int64_t c = 0; c < 6; ++c) {
        const bool inside = y >= 2 && y < 6 && c >= 1;
        const double want = inside ? src[std::size_t((pl * 4 + y - 2) * 5 + c - 1)] : 0.0;
        EXPECT_EQ(v[std::size_t((pl * 7 + y) * 6 + c)], want) << pl << " " << y << " " << c;
      }
  const WindowCopy crop{6, 7, 6, 4, 5, 2, 1};
  EXPECT_TRUE(all_close(window_copy(xp, crop, x.shape()), x, 0, 0));
}

// ---- conv_pool_index.hpp: the pooling kernels' per-element functions ---------------------------
namespace {

struct PoolCase {
  Shape x;
  Ints pool, st, pads;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {{2, 3, 6, 8}, {2, 2}, {2, 2}, {0, 0, 0, 0}},  // the CPU's 2x2 fast path
      {{2, 3, 7, 9}, {2, 2}, {2, 2}, {0, 0, 0, 0}},  // odd sizes: the last row/column unused
      {{2, 3, 5, 5}, {3, 2}, {2, 2}, {1, 1, 0, 1}},  // the op's test sample
      {{1, 2, 7, 6}, {3, 3}, {2, 2}, {0, 1, 0, 1}},  // "same", stride 2: asymmetric
      {{1, 2, 6, 5}, {3, 3}, {1, 1}, {1, 1, 1, 1}},  // "same", stride 1: overlapping windows
      {{2, 1, 5, 7}, {2, 3}, {1, 2}, {1, 0, 2, 1}},
      {{1, 2, 8, 7}, {2, 2}, {3, 3}, {0, 0, 0, 0}},  // strides past the window: gaps
      {{1, 1, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}},
      {{1, 1, 4, 4}, {4, 4}, {1, 1}, {3, 0, 0, 3}},  // windows mostly padding
  };
  return cases;
}

// Integers in [-2, 2] (ties everywhere), NaN at a few places when `nans`.
template <class T>
Tensor tie_heavy(const Shape& s, std::uint64_t seed, bool nans, DType dt) {
  Tensor r = rand_tensor(s, seed, -2.5, 2.5, DType::f64);
  std::vector<double> v = r.to_vector<double>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = std::round(v[i]);
    if (nans && i % 7 == 3) v[i] = std::nan("");
  }
  Tensor t = Tensor::empty(s, DType::f64);
  std::memcpy(t.data<double>(), v.data(), v.size() * sizeof(double));
  return t.cast(dt);
}

template <class T>
std::vector<T> host_run(std::int64_t n, const std::function<T(std::int64_t)>& f) {
  std::vector<T> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[std::size_t(i)] = f(i);
  return out;
}

template <class T>
void check_pooling(DType dt) {
  using namespace soma::cuda_detail;
  for (const PoolCase& k : pool_cases())
    for (bool nans : {false, true}) {
      const std::string what = shape_str(k.x) + " pool " + shape_str(k.pool) + " strides " +
                               shape_str(k.st) + " pads " + shape_str(k.pads) +
                               (nans ? " with NaN" : "") + " " + dtype_name(dt);
      const Attrs a = pool_attrs(k.pool, k.st, k.pads);
      const PoolDims p = plan_pool(k.x, k.pool, k.st, k.pads);
      const Tensor x = tie_heavy<T>(k.x, 5, nans, dt);
      const Shape pooled{k.x[0], k.x[1], p.oh, p.ow};
      const Tensor g = rand_tensor(pooled, 6, -1, 1, dt), h = rand_tensor(k.x, 7, -1, 1, dt);
      const T* xd = x.data<T>();
      const T* gd = g.data<T>();
      const T* hd = h.data<T>();
      const std::int64_t n_out = p.planes * p.oh * p.ow, n_in = p.planes * p.h * p.w;

      const Tensor y = call_op1(get_op("max_pool2d"), {x}, a);
      ASSERT_EQ(y.shape(), pooled) << what;
      EXPECT_TRUE(same_bits(host_run<T>(n_out, [&](auto i) { return max_pool_at<T>(xd, p, i); }),
                            y.to_vector<T>()))
          << "max_pool2d " << what;
      const Tensor dx = call_op1(get_op("max_pool2d_grad"), {x, g}, a);
      EXPECT_TRUE(same_bits(
          host_run<T>(n_in, [&](auto i) { return max_pool_grad_at<T>(xd, gd, p, i); }),
          dx.to_vector<T>()))
          << "max_pool2d_grad " << what;
      const Tensor gg = call_op1(get_op("max_pool2d_grad_grad"), {x, h}, a);
      EXPECT_TRUE(same_bits(
          host_run<T>(n_out, [&](auto i) { return max_pool_grad_grad_at<T>(xd, hd, p, i); }),
          gg.to_vector<T>()))
          << "max_pool2d_grad_grad " << what;
      const Tensor av = call_op1(get_op("avg_pool2d"), {x}, a);
      EXPECT_TRUE(same_bits(host_run<T>(n_out, [&](auto i) { return avg_pool_at<T>(xd, p, i); }),
                            av.to_vector<T>()))
          << "avg_pool2d " << what;
      const Tensor dav = call_op1(get_op("avg_pool2d_grad"), {g}, Attrs(a).set("input_shape", Ints(k.x)));
      EXPECT_TRUE(same_bits(
          host_run<T>(n_in, [&](auto i) { return avg_pool_grad_at<T>(gd, p, i); }),
          dav.to_vector<T>()))
          << "avg_pool2d_grad " << what;
      // count_include_pad: the whole window is the divisor.
      const Attrs ac = Attrs(a).set("count_include_pad", std::int64_t(1));
      PoolDims pc = plan_pool(k.x, k.pool, k.st, k.pads, true);
      const Tensor avc = call_op1(get_op("avg_pool2d"), {x}, ac);
      EXPECT_TRUE(same_bits(host_run<T>(n_out, [&](auto i) { return avg_pool_at<T>(xd, pc, i); }),
                            avc.to_vector<T>()))
          << "avg_pool2d count_include_pad " << what;
      const Tensor davc =
          call_op1(get_op("avg_pool2d_grad"), {g}, Attrs(ac).set("input_shape", Ints(k.x)));
      EXPECT_TRUE(same_bits(
          host_run<T>(n_in, [&](auto i) { return avg_pool_grad_at<T>(gd, pc, i); }),
          davc.to_vector<T>()))
          << "avg_pool2d_grad count_include_pad " << what;
      // max_pool2d_with_indices: the same values, and the argmax offsets.
      const auto yi = call_op(get_op("max_pool2d_with_indices"), {x}, a);
      EXPECT_TRUE(same_bits(yi[0].to_vector<T>(), y.to_vector<T>())) << what;
      EXPECT_EQ(host_run<std::int64_t>(n_out, [&](auto i) { return max_pool_index_at<T>(xd, p, i); }),
                yi[1].to_vector<std::int64_t>())
          << "max_pool2d_with_indices " << what;
    }
}

}  // namespace

TEST(CudaPoolIndex, MatchesTheCpuKernelsBitForBitF32) { check_pooling<float>(DType::f32); }
TEST(CudaPoolIndex, MatchesTheCpuKernelsBitForBitF64) { check_pooling<double>(DType::f64); }

TEST(CudaPoolIndex, TiesGoToTheFirstMaximumAndNaNWins) {
  using namespace soma::cuda_detail;
  // One 2x2 window: 3 3 / 3 1 -> the gradient goes to the first 3 only.
  const float x[4] = {3, 3, 3, 1};
  const float g[1] = {5};
  const PoolDims p = plan_pool({1, 1, 2, 2}, {2, 2}, {2, 2}, {0, 0, 0, 0});
  EXPECT_EQ(max_pool_grad_at<float>(x, g, p, 0), 5.0f);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(max_pool_grad_at<float>(x, g, p, i), 0.0f) << i;
  const float xn[4] = {1, NAN, 7, NAN};
  EXPECT_TRUE(std::isnan(max_pool_at<float>(xn, p, 0)));
  EXPECT_EQ(max_pool_grad_at<float>(xn, g, p, 1), 5.0f);
  EXPECT_EQ(max_pool_grad_at<float>(xn, g, p, 3), 0.0f);
}

TEST(CudaPoolIndex, AveragesCountOnlyRealElements) {
  using namespace soma::cuda_detail;
  // 3x3 windows, "same" padding on a 2x2 input: every window holds the 4 real elements.
  const double x[4] = {1, 2, 3, 6};
  const PoolDims p = plan_pool({1, 1, 2, 2}, {3, 3}, {1, 1}, {1, 1, 1, 1});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(avg_pool_at<double>(x, p, i), 3.0) << i;
}

// ---- the bias + ReLU epilogue -------------------------------------------------------------------
TEST(CudaConvEpilogue, BiasAndReluMatchConv2dBiasAct) {
  using namespace soma::cuda_detail;
  const Tensor x = rand_tensor({2, 3, 6, 5}, 8), w = rand_tensor({4, 3, 3, 3}, 9);
  const Tensor b = rand_tensor({4}, 10);
  const Attrs a = conv_attrs({1, 2}, {1, 1, 0, 1}, {1, 1}, 1);
  const Tensor y = call_op1(get_op("conv2d"), {x, w}, a);
  const std::int64_t hw = y.dim(2) * y.dim(3);
  for (bool relu : {false, true})
    for (bool bias : {false, true}) {
      if (!relu && !bias) continue;
      Attrs ab = Attrs(a).set("relu", std::int64_t(relu));
      const Tensor want = bias ? call_op1(get_op("conv2d_bias_act"), {x, w, b}, ab)
                               : call_op1(get_op("conv2d_bias_act"), {x, w}, ab);
      const double* yd = y.data<double>();
      const double* bd = bias ? b.data<double>() : nullptr;
      Tensor got = Tensor::empty(y.shape(), DType::f64);
      for (std::int64_t i = 0; i < y.numel(); ++i)
        got.data<double>()[i] = bias_act_at<double>(yd, bd, 4, hw, relu, i);
      EXPECT_TRUE(all_close(got, want, 1e-12, 1e-12)) << "relu " << relu << " bias " << bias;
    }
  // The CPU kernel's ReLU: v <= 0 -> +0, NaN stays.
  const float v[4] = {-0.0f, -1.0f, NAN, 2.0f};
  EXPECT_FALSE(std::signbit(bias_act_at<float>(v, static_cast<const float*>(nullptr), 1, 4, true, 0)));
  EXPECT_EQ(bias_act_at<float>(v, static_cast<const float*>(nullptr), 1, 4, true, 1), 0.0f);
  EXPECT_TRUE(std::isnan(bias_act_at<float>(v, static_cast<const float*>(nullptr), 1, 4, true, 2)));
  EXPECT_EQ(bias_act_at<float>(v, static_cast<const float*>(nullptr), 1, 4, true, 3), 2.0f);
}
