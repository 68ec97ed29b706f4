// Chapter 03, Task 5 — reference solution: AWQ's grid search of the scaling exponent.
// Declaration and contract: common/model/include/lio/quantization.h.
#include <algorithm>
#include <cmath>
#include <limits>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

AwqSearch awq_search_scales(std::span<const float> mean_abs_x, int n_grid,
                            const std::function<double(std::span<const float> scales)>& loss) {
  if (n_grid < 1 || mean_abs_x.empty()) {
    throw InvalidArgument("awq_search_scales: want n_grid >= 1 and at least one channel, got n_grid " +
                          std::to_string(n_grid) + ", " + std::to_string(mean_abs_x.size()) + " channels");
  }
  AwqSearch best;
  best.loss = std::numeric_limits<double>::infinity();
  std::vector<float> s(mean_abs_x.size());
  for (int i = 0; i < n_grid; ++i) {
    const double alpha = static_cast<double>(i) / n_grid;
    // s_c = max(mean_abs_x[c]^alpha, 1e-4), then s /= sqrt(max(s) * min(s)) (AWQ eq. 5, AutoAWQ).
    for (size_t c = 0; c < s.size(); ++c)
      s[c] = std::max(static_cast<float>(std::pow(static_cast<double>(mean_abs_x[c]), alpha)), 1e-4f);
    const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
    const float norm = std::sqrt(*lo * *hi);
    for (float& v : s) v /= norm;
    const double l = loss(s);
    if (l < best.loss) {
      best.alpha = alpha;
      best.loss = l;
      best.scales = s;
    }
  }
  return best;
}

}  // namespace lio
