// Uses an installed soma the way a user would; exits non-zero when a result is wrong.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <soma/soma.hpp>

namespace {

int failures = 0;

void expect_near(const char* what, double actual, double expected) {
  if (std::abs(actual - expected) > 1e-4 * (1.0 + std::abs(expected))) {
    std::printf("FAIL %s: got %g, expected %g\n", what, actual, expected);
    ++failures;
  } else {
    std::printf("ok   %s = %g\n", what, actual);
  }
}

}  // namespace

int main() {
  // Higher-order chain rule through a persistent tape: z = (x^2)^2 at x = 3.
  auto x = soma::constant(3.0f);
  soma::GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  auto y = x * x;
  auto z = y * y;
  expect_near("dz/dx", tape.gradient(z, x).item<double>(), 108.0);
  expect_near("dy/dx", tape.gradient(y, x).item<double>(), 6.0);

  // A matmul and a reduction, differentiated with respect to a Variable:
  // loss = sum(a @ w), so d loss / d w[k][j] = sum_i a[i][k].
  auto a = soma::constant<float>({{1, 2}, {3, 4}, {5, 6}});
  soma::Variable w(soma::constant<float>({{0.5f}, {-1.0f}}), "w");
  soma::GradientTape tape2;
  auto loss = soma::sum(soma::matmul(a, w.value()));
  auto grad = tape2.gradient(loss, w);
  expect_near("loss", loss.item<double>(), (1 + 3 + 5) * 0.5 - (2 + 4 + 6) * 1.0);
  std::vector<double> g = grad.to_vector<double>();
  if (g.size() != 2) {
    std::printf("FAIL d loss/d w: expected 2 elements, got %zu\n", g.size());
    return 1;
  }
  expect_near("d loss/d w[0]", g[0], 9.0);
  expect_near("d loss/d w[1]", g[1], 12.0);

  // The headers' version and the library's agree (one package, one version).
  const std::string headers = std::to_string(SOMA_VERSION_MAJOR) + "." +
                              std::to_string(SOMA_VERSION_MINOR) + "." +
                              std::to_string(SOMA_VERSION_PATCH);
  if (headers != soma::version()) {
    std::printf("FAIL version: headers %s, library %s\n", headers.c_str(), soma::version());
    ++failures;
  } else {
    std::printf("ok   version = %s\n", soma::version());
  }

  if (failures != 0) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("consumer: all checks passed\n");
  return 0;
}
