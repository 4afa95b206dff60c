// SimpleRNN, LSTM and GRU: forward passes against plain-loop references (using the layers' own
// weights), Keras' weight layouts and parameter counts, states, go_backwards, gradients through
// time (input, initial states and every weight) and error messages.
#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "soma/nn/recurrent.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::rand_tensor;

namespace {

constexpr std::int64_t B = 2, T = 3, F = 2, U = 3;

// ---- plain-loop references ------------------------------------------------------------------

double sigm(double v) { return 1.0 / (1.0 + std::exp(-v)); }

struct Expected {
  std::vector<double> seq;   // [B, T, U], in processing order (reversed with go_backwards)
  std::vector<double> h, c;  // final states [B, U]
};

struct RefInput {
  std::vector<double> x;       // [B, T, F]
  std::vector<double> kernel;  // [F, k*U]
  std::vector<double> rec;     // [U, k*U]
  std::vector<double> bias;    // [k*U] or [2, 3U] (GRU reset_after); empty without bias
  std::vector<double> h0, c0;  // [B, U]; empty: zeros
  bool go_backwards = false;
};

// x[b, t] @ kernel for a gate width n = k*U.
std::vector<double> project(const RefInput& in, std::int64_t b, std::int64_t t, std::int64_t n) {
  std::vector<double> out(std::size_t(n), 0.0);
  for (std::int64_t g = 0; g < n; ++g)
    for (std::int64_t f = 0; f < F; ++f)
      out[std::size_t(g)] +=
          in.x[std::size_t((b * T + t) * F + f)] * in.kernel[std::size_t(f * n + g)];
  return out;
}

// h @ rec (columns [col0, col0 + width) of a [U, n] matrix).
std::vector<double> rec_matmul(const std::vector<double>& h, const std::vector<double>& rec,
                               std::int64_t n, std::int64_t col0, std::int64_t width) {
  std::vector<double> out(std::size_t(width), 0.0);
  for (std::int64_t g = 0; g < width; ++g)
    for (std::int64_t j = 0; j < U; ++j)
      out[std::size_t(g)] += h[std::size_t(j)] * rec[std::size_t(j * n + col0 + g)];
  return out;
}

// Runs `cell(b, t, h, c)` (updating h, c of one batch row) over time, collecting outputs.
Expected run_reference(const RefInput& in,
                       const std::function<void(std::int64_t, std::int64_t, std::vector<double>&,
                                                std::vector<double>&)>& cell) {
  Expected r;
  r.seq.assign(std::size_t(B * T * U), 0.0);
  r.h.assign(std::size_t(B * U), 0.0);
  r.c.assign(std::size_t(B * U), 0.0);
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<double> h(std::size_t(U), 0.0), c(std::size_t(U), 0.0);
    for (std::int64_t u = 0; u < U; ++u) {
      if (!in.h0.empty()) h[std::size_t(u)] = in.h0[std::size_t(b * U + u)];
      if (!in.c0.empty()) c[std::size_t(u)] = in.c0[std::size_t(b * U + u)];
    }
    for (std::int64_t i = 0; i < T; ++i) {
      std::int64_t t = in.go_backwards ? T - 1 - i : i;
      cell(b, t, h, c);
      for (std::int64_t u = 0; u < U; ++u)
        r.seq[std::size_t((b * T + i) * U + u)] = h[std::size_t(u)];
    }
    for (std::int64_t u = 0; u < U; ++u) {
      r.h[std::size_t(b * U + u)] = h[std::size_t(u)];
      r.c[std::size_t(b * U + u)] = c[std::size_t(u)];
    }
  }
  return r;
}

double bias_at(const RefInput& in, std::int64_t i) {
  return in.bias.empty() ? 0.0 : in.bias[std::size_t(i)];
}

Expected simple_rnn_reference(const RefInput& in) {
  return run_reference(
      in, [&](std::int64_t b, std::int64_t t, std::vector<double>& h, std::vector<double>&) {
        std::vector<double> xp = project(in, b, t, U), rp = rec_matmul(h, in.rec, U, 0, U);
        for (std::int64_t u = 0; u < U; ++u)
          h[std::size_t(u)] = std::tanh(xp[std::size_t(u)] + rp[std::size_t(u)] + bias_at(in, u));
      });
}

Expected lstm_reference(const RefInput& in) {
  const std::int64_t n = 4 * U;
  return run_reference(
      in, [&](std::int64_t b, std::int64_t t, std::vector<double>& h, std::vector<double>& c) {
        std::vector<double> xp = project(in, b, t, n), rp = rec_matmul(h, in.rec, n, 0, n);
        auto z = [&](std::int64_t g) {
          return xp[std::size_t(g)] + rp[std::size_t(g)] + bias_at(in, g);
        };
        for (std::int64_t u = 0; u < U; ++u) {
          double i = sigm(z(u)), f = sigm(z(U + u)), g = std::tanh(z(2 * U + u)),
                 o = sigm(z(3 * U + u));
          c[std::size_t(u)] = f * c[std::size_t(u)] + i * g;
          h[std::size_t(u)] = o * std::tanh(c[std::size_t(u)]);
        }
      });
}

Expected gru_reference(const RefInput& in, bool reset_after) {
  const std::int64_t n = 3 * U;
  return run_reference(in, [&](std::int64_t b, std::int64_t t, std::vector<double>& h,
                               std::vector<double>&) {
    std::vector<double> xp = project(in, b, t, n);
    std::vector<double> h_new(static_cast<std::size_t>(U));
    if (reset_after) {
      // bias [2, 3U]: row 0 on the input side, row 1 on the recurrent side.
      std::vector<double> rp = rec_matmul(h, in.rec, n, 0, n);
      for (std::int64_t u = 0; u < U; ++u) {
        double z =
            sigm(xp[std::size_t(u)] + bias_at(in, u) + rp[std::size_t(u)] + bias_at(in, n + u));
        double r = sigm(xp[std::size_t(U + u)] + bias_at(in, U + u) + rp[std::size_t(U + u)] +
                        bias_at(in, n + U + u));
        double hh = std::tanh(xp[std::size_t(2 * U + u)] + bias_at(in, 2 * U + u) +
                              r * (rp[std::size_t(2 * U + u)] + bias_at(in, n + 2 * U + u)));
        h_new[std::size_t(u)] = z * h[std::size_t(u)] + (1 - z) * hh;
      }
    } else {
      std::vector<double> rp = rec_matmul(h, in.rec, n, 0, 2 * U);
      const auto n_u = static_cast<std::size_t>(U);
      std::vector<double> z(n_u), r(n_u), rh(n_u);
      for (std::int64_t u = 0; u < U; ++u) {
        z[std::size_t(u)] = sigm(xp[std::size_t(u)] + bias_at(in, u) + rp[std::size_t(u)]);
        r[std::size_t(u)] =
            sigm(xp[std::size_t(U + u)] + bias_at(in, U + u) + rp[std::size_t(U + u)]);
        rh[std::size_t(u)] = r[std::size_t(u)] * h[std::size_t(u)];
      }
      std::vector<double> rrh = rec_matmul(rh, in.rec, n, 2 * U, U);
      for (std::int64_t u = 0; u < U; ++u) {
        double hh =
            std::tanh(xp[std::size_t(2 * U + u)] + bias_at(in, 2 * U + u) + rrh[std::size_t(u)]);
        h_new[std::size_t(u)] =
            z[std::size_t(u)] * h[std::size_t(u)] + (1 - z[std::size_t(u)]) * hh;
      }
    }
    h = h_new;
  });
}

// ---- helpers --------------------------------------------------------------------------------

std::map<std::string, Variable> params_of(const nn::Module& m) {
  std::map<std::string, Variable> out;
  for (auto& [name, v] : m.named_parameters()) out.emplace(name, v);
  return out;
}

// Builds the layer and replaces every weight with random values (biases included, so that their
// paths are exercised; the default zero biases would hide a misplaced bias).
void randomize(nn::Module& m, std::uint64_t seed) {
  m.build_for({B, T, F});
  for (auto& [name, v] : m.named_parameters())
    v.assign(rand_tensor(v.shape(), seed++, -0.8, 0.8, v.dtype()));
}

RefInput reference_input(const nn::Module& m, const Tensor& x) {
  auto p = params_of(m);
  RefInput in;
  in.x = x.to_vector<double>();
  in.kernel = p.at("kernel").value().to_vector<double>();
  in.rec = p.at("recurrent_kernel").value().to_vector<double>();
  if (p.count("bias")) in.bias = p.at("bias").value().to_vector<double>();
  return in;
}

Tensor x_input(std::uint64_t seed = 7) { return rand_tensor({B, T, F}, seed); }

// Last step of a [B, T, U] reference sequence.
std::vector<double> last_step(const std::vector<double>& seq) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t u = 0; u < U; ++u) out.push_back(seq[std::size_t((b * T + T - 1) * U + u)]);
  return out;
}

// All outputs of call(), flattened and joined, so one check covers outputs and states.
Tensor joined(const std::vector<Tensor>& outs) {
  std::vector<Tensor> flat;
  for (const Tensor& t : outs) flat.push_back(reshape(t, {-1}));
  return concat(flat, 0);
}

// Finite-difference check of d sum(f() * w) / d parameter for every parameter of the layer,
// perturbing each weight element in place.
::testing::AssertionResult check_weight_gradients(nn::Module& layer,
                                                  const std::function<Tensor()>& f,
                                                  double eps = 1e-6, double tol = 1e-5) {
  auto params = layer.named_parameters();
  Tensor w;
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    Tensor y = f();
    w = rand_tensor(y.shape(), 4321, -1.0, 1.0, y.dtype());
    std::vector<Variable> vars;
    for (auto& [n, v] : params) vars.push_back(v);
    grads = tape.gradient(sum(y * w), vars, UnconnectedGradients::Zero);
  }
  auto loss = [&] { return sum(f() * w).item<double>(); };
  for (std::size_t k = 0; k < params.size(); ++k) {
    // Plain references, not a structured binding: clang 14 cannot capture bindings in lambdas.
    const auto& name = params[k].first;
    auto& v = params[k].second;
    if (!grads[k].defined() || grads[k].shape() != v.shape())
      return ::testing::AssertionFailure() << "gradient of '" << name << "' is missing or has the "
                                           << "wrong shape";
    std::vector<double> base = v.value().to_vector<double>();
    std::vector<double> g = grads[k].to_vector<double>();
    for (std::size_t j = 0; j < base.size(); ++j) {
      auto shifted = [&](double delta) {
        std::vector<double> vals = base;
        vals[j] += delta;
        v.assign(constant(vals, v.shape()));
        return loss();
      };
      double num = (shifted(eps) - shifted(-eps)) / (2 * eps);
      v.assign(constant(base, v.shape()));
      if (std::abs(num - g[j]) > tol * (1.0 + std::abs(num)))
        return ::testing::AssertionFailure()
               << "weight '" << name << "' element " << j << ": tape gradient " << g[j]
               << " vs finite difference " << num;
    }
  }
  return ::testing::AssertionSuccess();
}

using soma::testing::error_of;

}  // namespace

// ---- SimpleRNN ------------------------------------------------------------------------------

TEST(SimpleRNN, WeightsHaveKerasNamesAndShapes) {
  nn::SimpleRNN rnn(U);
  rnn.build_for({B, T, F});
  auto p = params_of(rnn);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p.at("kernel").shape(), (Shape{F, U}));
  EXPECT_EQ(p.at("recurrent_kernel").shape(), (Shape{U, U}));
  EXPECT_EQ(p.at("bias").shape(), (Shape{U}));
  EXPECT_EQ(p.at("kernel").dtype(), DType::f32);
}

TEST(SimpleRNN, ParameterCountMatchesKeras) {
  nn::SimpleRNN rnn(4);
  rnn.build_for({1, 5, 3});
  EXPECT_EQ(rnn.count_params(), 4 * (3 + 4 + 1));
  nn::SimpleRNN no_bias(4, {.use_bias = false});
  no_bias.build_for({1, 5, 3});
  EXPECT_EQ(no_bias.count_params(), 4 * (3 + 4));
}

TEST(SimpleRNN, LastOutputMatchesReference) {
  nn::SimpleRNN rnn(U, {.dtype = DType::f64});
  randomize(rnn, 1);
  Tensor x = x_input();
  Tensor y = rnn(x);
  EXPECT_EQ(y.shape(), (Shape{B, U}));
  EXPECT_TRUE(all_close(y, last_step(simple_rnn_reference(reference_input(rnn, x)).seq), 1e-12));
}

TEST(SimpleRNN, ReturnSequencesMatchesReference) {
  nn::SimpleRNN rnn(U, {.return_sequences = true, .dtype = DType::f64});
  randomize(rnn, 1);
  Tensor x = x_input();
  Tensor y = rnn(x);
  EXPECT_EQ(y.shape(), (Shape{B, T, U}));
  EXPECT_TRUE(all_close(y, simple_rnn_reference(reference_input(rnn, x)).seq, 1e-12));
}

TEST(SimpleRNN, ReturnStateAppendsFinalState) {
  nn::SimpleRNN rnn(U, {.return_sequences = true, .return_state = true, .dtype = DType::f64});
  randomize(rnn, 1);
  Tensor x = x_input();
  auto outs = rnn.call({x});
  ASSERT_EQ(outs.size(), 2u);
  Expected r = simple_rnn_reference(reference_input(rnn, x));
  EXPECT_TRUE(all_close(outs[0], r.seq, 1e-12));
  EXPECT_EQ(outs[1].shape(), (Shape{B, U}));
  EXPECT_TRUE(all_close(outs[1], r.h, 1e-12));
  // operator() gives the first output only.
  EXPECT_EQ(rnn(x).shape(), (Shape{B, T, U}));
}

TEST(SimpleRNN, GoBackwardsProcessesLastStepFirst) {
  nn::SimpleRNN rnn(U, {.return_sequences = true, .go_backwards = true, .dtype = DType::f64});
  randomize(rnn, 1);
  Tensor x = x_input();
  RefInput in = reference_input(rnn, x);
  in.go_backwards = true;
  Expected r = simple_rnn_reference(in);
  EXPECT_TRUE(all_close(rnn(x), r.seq, 1e-12));
  // ... which differs from the forward direction.
  in.go_backwards = false;
  EXPECT_FALSE(all_close(rnn(x), simple_rnn_reference(in).seq, 1e-6));
}

TEST(SimpleRNN, InitialStateIsUsed) {
  nn::SimpleRNN rnn(U, {.dtype = DType::f64});
  randomize(rnn, 1);
  Tensor x = x_input(), h0 = rand_tensor({B, U}, 99);
  RefInput in = reference_input(rnn, x);
  in.h0 = h0.to_vector<double>();
  auto outs = rnn.call({x, h0});
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_TRUE(all_close(outs[0], last_step(simple_rnn_reference(in).seq), 1e-12));
}

TEST(SimpleRNN, Float32ForwardMatchesReference) {
  nn::SimpleRNN rnn(U);
  randomize(rnn, 1);
  Tensor x = cast(x_input(), DType::f32);
  Tensor y = rnn(x);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(y, last_step(simple_rnn_reference(reference_input(rnn, x)).seq), 1e-5));
}

TEST(SimpleRNN, ActivationOptionIsUsed) {
  nn::SimpleRNN rnn(U, {.activation = nn::relu, .return_sequences = true, .dtype = DType::f64});
  randomize(rnn, 1);
  Tensor y = rnn(x_input());
  EXPECT_GE(min(y).item<double>(), 0.0);
  EXPECT_GT(max(y).item<double>(), 1e-3);
}

TEST(SimpleRNN, GradientsWrtInputAndInitialState) {
  nn::SimpleRNN rnn(U, {.return_sequences = true, .return_state = true, .dtype = DType::f64});
  randomize(rnn, 1);
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return joined(rnn.call(in)); },
                              {x_input(), rand_tensor({B, U}, 5)}));
}

TEST(SimpleRNN, GradientsWrtWeights) {
  nn::SimpleRNN rnn(U, {.return_sequences = true, .return_state = true, .dtype = DType::f64});
  randomize(rnn, 1);
  Tensor x = x_input(), h0 = rand_tensor({B, U}, 5);
  EXPECT_TRUE(check_weight_gradients(rnn, [&] { return joined(rnn.call({x, h0})); }));
}

TEST(SimpleRNN, GradientsWrtWeightsGoingBackwardsFromLastOutput) {
  nn::SimpleRNN rnn(U, {.go_backwards = true, .dtype = DType::f64});
  randomize(rnn, 1);
  Tensor x = x_input();
  EXPECT_TRUE(check_weight_gradients(rnn, [&] { return rnn(x); }));
}

TEST(SimpleRNN, OutputShapeFollowsReturnSequences) {
  EXPECT_EQ(nn::SimpleRNN(5).output_shape({-1, 7, 2}), (Shape{-1, 5}));
  EXPECT_EQ(nn::SimpleRNN(5, {.return_sequences = true}).output_shape({-1, 7, 2}),
            (Shape{-1, 7, 5}));
}

TEST(SimpleRNN, RankOtherThanThreeThrowsNamingLayerAndShape) {
  nn::SimpleRNN rnn(U);
  rnn.set_name("my_rnn");
  std::string msg = error_of([&] { rnn(zeros({2, 3})); });
  EXPECT_NE(msg.find("SimpleRNN 'my_rnn'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 3 [batch, time, features]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
}

TEST(SimpleRNN, FeatureCountChangeAfterBuildThrows) {
  nn::SimpleRNN rnn(U);
  rnn(zeros({B, T, F}));
  std::string msg = error_of([&] { rnn(zeros({B, T, F + 1})); });
  EXPECT_NE(msg.find("SimpleRNN"), std::string::npos) << msg;
  EXPECT_NE(msg.find("built for 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3, 3]"), std::string::npos) << msg;
}

TEST(SimpleRNN, BadInitialStateShapeThrows) {
  nn::SimpleRNN rnn(U);
  std::string msg = error_of([&] { rnn.call({zeros({B, T, F}), zeros({B, U + 1})}); });
  EXPECT_NE(msg.find("initial state 0 must have shape [2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got [2, 4]"), std::string::npos) << msg;
}

TEST(SimpleRNN, WrongNumberOfInputsThrows) {
  nn::SimpleRNN rnn(U);
  std::string msg = error_of([&] { rnn.call({zeros({B, T, F}), zeros({B, U}), zeros({B, U})}); });
  EXPECT_NE(msg.find("1 initial state (or none), got 3 inputs"), std::string::npos) << msg;
}

TEST(SimpleRNN, EmptySequenceThrows) {
  nn::SimpleRNN rnn(U);
  std::string msg = error_of([&] { rnn(zeros({B, 0, F})); });
  EXPECT_NE(msg.find("no time steps"), std::string::npos) << msg;
}

TEST(SimpleRNN, NonPositiveUnitsThrow) {
  std::string msg = error_of([] { nn::SimpleRNN rnn(0); });
  EXPECT_NE(msg.find("SimpleRNN: units must be positive, got 0"), std::string::npos) << msg;
}

// ---- LSTM -----------------------------------------------------------------------------------

TEST(LSTM, WeightsHaveKerasNamesAndShapes) {
  nn::LSTM lstm(U);
  lstm.build_for({B, T, F});
  auto p = params_of(lstm);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p.at("kernel").shape(), (Shape{F, 4 * U}));
  EXPECT_EQ(p.at("recurrent_kernel").shape(), (Shape{U, 4 * U}));
  EXPECT_EQ(p.at("bias").shape(), (Shape{4 * U}));
}

TEST(LSTM, ParameterCountMatchesKeras) {
  nn::LSTM lstm(4);
  lstm.build_for({1, 5, 3});
  EXPECT_EQ(lstm.count_params(), 128);  // 4 * units * (features + units + 1)
}

TEST(LSTM, UnitForgetBiasStartsForgetGateAtOne) {
  nn::LSTM lstm(U);
  lstm.build_for({B, T, F});
  EXPECT_TRUE(all_close(params_of(lstm).at("bias").value(), {0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0}));
  nn::LSTM plain(U, {.unit_forget_bias = false});
  plain.build_for({B, T, F});
  EXPECT_TRUE(all_close(params_of(plain).at("bias").value(), std::vector<double>(12, 0.0)));
}

TEST(LSTM, RecurrentKernelIsOrthogonalByDefault) {
  nn::LSTM lstm(U, {.dtype = DType::f64});
  lstm.build_for({B, T, F});
  Tensor r = params_of(lstm).at("recurrent_kernel").value();  // [U, 4U]: orthonormal rows
  EXPECT_TRUE(all_close(matmul(r, transpose(r)), eye(U, std::nullopt, DType::f64), 1e-10));
}

TEST(LSTM, LastOutputMatchesReference) {
  nn::LSTM lstm(U, {.dtype = DType::f64});
  randomize(lstm, 11);
  Tensor x = x_input();
  EXPECT_TRUE(all_close(lstm(x), last_step(lstm_reference(reference_input(lstm, x)).seq), 1e-12));
}

TEST(LSTM, ReturnSequencesAndStatesMatchReference) {
  nn::LSTM lstm(U, {.return_sequences = true, .return_state = true, .dtype = DType::f64});
  randomize(lstm, 11);
  Tensor x = x_input();
  auto outs = lstm.call({x});
  ASSERT_EQ(outs.size(), 3u);
  Expected r = lstm_reference(reference_input(lstm, x));
  EXPECT_TRUE(all_close(outs[0], r.seq, 1e-12));
  EXPECT_TRUE(all_close(outs[1], r.h, 1e-12));
  EXPECT_TRUE(all_close(outs[2], r.c, 1e-12));
}

TEST(LSTM, GoBackwardsMatchesReference) {
  nn::LSTM lstm(U, {.return_sequences = true, .go_backwards = true, .dtype = DType::f64});
  randomize(lstm, 11);
  Tensor x = x_input();
  RefInput in = reference_input(lstm, x);
  in.go_backwards = true;
  EXPECT_TRUE(all_close(lstm(x), lstm_reference(in).seq, 1e-12));
}

TEST(LSTM, InitialStatesAreUsed) {
  nn::LSTM lstm(U, {.return_state = true, .dtype = DType::f64});
  randomize(lstm, 11);
  Tensor x = x_input(), h0 = rand_tensor({B, U}, 21), c0 = rand_tensor({B, U}, 22);
  RefInput in = reference_input(lstm, x);
  in.h0 = h0.to_vector<double>();
  in.c0 = c0.to_vector<double>();
  auto outs = lstm.call({x, h0, c0});
  ASSERT_EQ(outs.size(), 3u);
  Expected r = lstm_reference(in);
  EXPECT_TRUE(all_close(outs[0], r.h, 1e-12));
  EXPECT_TRUE(all_close(outs[2], r.c, 1e-12));
}

TEST(LSTM, NoBiasMatchesReference) {
  nn::LSTM lstm(U, {.use_bias = false, .dtype = DType::f64});
  randomize(lstm, 11);
  EXPECT_EQ(params_of(lstm).count("bias"), 0u);
  Tensor x = x_input();
  EXPECT_TRUE(all_close(lstm(x), last_step(lstm_reference(reference_input(lstm, x)).seq), 1e-12));
}

TEST(LSTM, GradientsWrtInputAndInitialStates) {
  nn::LSTM lstm(U, {.return_sequences = true, .return_state = true, .dtype = DType::f64});
  randomize(lstm, 11);
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return joined(lstm.call(in)); },
                              {x_input(), rand_tensor({B, U}, 5), rand_tensor({B, U}, 6)}));
}

TEST(LSTM, GradientsWrtWeights) {
  nn::LSTM lstm(U, {.return_sequences = true, .return_state = true, .dtype = DType::f64});
  randomize(lstm, 11);
  Tensor x = x_input(), h0 = rand_tensor({B, U}, 5), c0 = rand_tensor({B, U}, 6);
  EXPECT_TRUE(check_weight_gradients(lstm, [&] { return joined(lstm.call({x, h0, c0})); }));
}

TEST(LSTM, GradientsWrtWeightsGoingBackwardsFromLastOutput) {
  nn::LSTM lstm(U, {.go_backwards = true, .dtype = DType::f64});
  randomize(lstm, 11);
  Tensor x = x_input();
  EXPECT_TRUE(check_weight_gradients(lstm, [&] { return lstm(x); }));
}

TEST(LSTM, RankOtherThanThreeThrowsNamingLayerAndShape) {
  nn::LSTM lstm(U);
  std::string msg = error_of([&] { lstm(zeros({2, 3, 4, 5})); });
  EXPECT_NE(msg.find("LSTM 'lstm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected input of rank 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3, 4, 5]"), std::string::npos) << msg;
}

TEST(LSTM, MissingCellStateThrows) {
  nn::LSTM lstm(U);
  std::string msg = error_of([&] { lstm.call({zeros({B, T, F}), zeros({B, U})}); });
  EXPECT_NE(msg.find("2 initial states (or none), got 2 inputs"), std::string::npos) << msg;
}

// ---- GRU ------------------------------------------------------------------------------------

TEST(GRU, WeightsHaveKerasNamesAndShapes) {
  nn::GRU gru(U);
  gru.build_for({B, T, F});
  auto p = params_of(gru);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p.at("kernel").shape(), (Shape{F, 3 * U}));
  EXPECT_EQ(p.at("recurrent_kernel").shape(), (Shape{U, 3 * U}));
  EXPECT_EQ(p.at("bias").shape(), (Shape{2, 3 * U}));
  nn::GRU v1(U, {.reset_after = false});
  v1.build_for({B, T, F});
  EXPECT_EQ(params_of(v1).at("bias").shape(), (Shape{3 * U}));
}

TEST(GRU, ParameterCountMatchesKeras) {
  nn::GRU gru(4);
  gru.build_for({1, 5, 3});
  EXPECT_EQ(gru.count_params(), 3 * 4 * (3 + 4 + 2));
  nn::GRU v1(4, {.reset_after = false});
  v1.build_for({1, 5, 3});
  EXPECT_EQ(v1.count_params(), 3 * 4 * (3 + 4 + 1));
}

TEST(GRU, ResetAfterMatchesReference) {
  nn::GRU gru(U, {.return_sequences = true, .dtype = DType::f64});
  randomize(gru, 31);
  Tensor x = x_input();
  EXPECT_TRUE(all_close(gru(x), gru_reference(reference_input(gru, x), true).seq, 1e-12));
}

TEST(GRU, ResetBeforeMatchesReference) {
  nn::GRU gru(U, {.reset_after = false, .return_sequences = true, .dtype = DType::f64});
  randomize(gru, 31);
  Tensor x = x_input();
  EXPECT_TRUE(all_close(gru(x), gru_reference(reference_input(gru, x), false).seq, 1e-12));
}

TEST(GRU, ResetAfterAndBeforeDiffer) {
  // Same weights in both layouts (the second bias row zero): the placement of r still matters.
  nn::GRU after(U, {.use_bias = false, .dtype = DType::f64});
  nn::GRU before(U, {.use_bias = false, .reset_after = false, .dtype = DType::f64});
  randomize(after, 31);
  randomize(before, 31);
  Tensor x = x_input();
  EXPECT_FALSE(all_close(after(x), before(x), 1e-6));
}

TEST(GRU, LastOutputAndStateMatchReference) {
  nn::GRU gru(U, {.return_state = true, .dtype = DType::f64});
  randomize(gru, 31);
  Tensor x = x_input();
  auto outs = gru.call({x});
  ASSERT_EQ(outs.size(), 2u);
  Expected r = gru_reference(reference_input(gru, x), true);
  EXPECT_TRUE(all_close(outs[0], last_step(r.seq), 1e-12));
  EXPECT_TRUE(all_close(outs[1], r.h, 1e-12));
}

TEST(GRU, GoBackwardsWithInitialStateMatchesReference) {
  nn::GRU gru(U, {.return_sequences = true, .go_backwards = true, .dtype = DType::f64});
  randomize(gru, 31);
  Tensor x = x_input(), h0 = rand_tensor({B, U}, 41);
  RefInput in = reference_input(gru, x);
  in.go_backwards = true;
  in.h0 = h0.to_vector<double>();
  EXPECT_TRUE(all_close(gru.call({x, h0})[0], gru_reference(in, true).seq, 1e-12));
}

TEST(GRU, ResetAfterGradientsWrtInputAndInitialState) {
  nn::GRU gru(U, {.return_sequences = true, .return_state = true, .dtype = DType::f64});
  randomize(gru, 31);
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return joined(gru.call(in)); },
                              {x_input(), rand_tensor({B, U}, 5)}));
}

TEST(GRU, ResetAfterGradientsWrtWeights) {
  nn::GRU gru(U, {.return_sequences = true, .return_state = true, .dtype = DType::f64});
  randomize(gru, 31);
  Tensor x = x_input(), h0 = rand_tensor({B, U}, 5);
  EXPECT_TRUE(check_weight_gradients(gru, [&] { return joined(gru.call({x, h0})); }));
}

TEST(GRU, ResetBeforeGradientsWrtInputAndInitialState) {
  nn::GRU gru(U, {.reset_after = false, .return_sequences = true, .dtype = DType::f64});
  randomize(gru, 31);
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return gru.call(in)[0]; },
                              {x_input(), rand_tensor({B, U}, 5)}));
}

TEST(GRU, ResetBeforeGradientsWrtWeights) {
  nn::GRU gru(
      U,
      {.reset_after = false, .return_sequences = true, .go_backwards = true, .dtype = DType::f64});
  randomize(gru, 31);
  Tensor x = x_input();
  EXPECT_TRUE(check_weight_gradients(gru, [&] { return gru(x); }));
}

TEST(GRU, RankOtherThanThreeThrowsNamingLayerAndShape) {
  nn::GRU gru(U);
  std::string msg = error_of([&] { gru(zeros({4})); });
  EXPECT_NE(msg.find("GRU 'gru"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got shape [4]"), std::string::npos) << msg;
}

// ---- shared behaviour -----------------------------------------------------------------------

TEST(Recurrent, CopyIsUnbuiltAndBuildsItsOwnWeights) {
  nn::LSTM a(U);
  a(zeros({B, T, F}));
  nn::LSTM b = a;
  EXPECT_FALSE(b.built());
  Tensor y = b(zeros({B, T, F + 2}));  // a different feature count is fine for the copy
  EXPECT_EQ(y.shape(), (Shape{B, U}));
  EXPECT_EQ(params_of(b).at("kernel").shape(), (Shape{F + 2, 4 * U}));
}

TEST(Recurrent, InputIsCastToLayerDtype) {
  nn::GRU gru(U, {.dtype = DType::f64});
  Tensor y = gru(zeros({B, T, F}, DType::f32));
  EXPECT_EQ(y.dtype(), DType::f64);
}

TEST(Recurrent, RegularizersAddLosses) {
  nn::SimpleRNN rnn(U, {.kernel_regularizer = nn::regularizers::l2(0.5), .dtype = DType::f64});
  rnn.build_for({B, T, F});
  auto losses = rnn.regularization_losses();
  ASSERT_EQ(losses.size(), 1u);
  Tensor k = params_of(rnn).at("kernel").value();
  EXPECT_NEAR(losses[0].item<double>(), 0.5 * sum(k * k).item<double>(), 1e-12);
}
