#pragma once
// The step's loss totals on the device (kernels/backend.h, "step totals"): the count of targets
// a loss sum covers and the normaliser the gradients are scaled by. Each has a plain reference
// beside it (tests/kernels/test_step_totals.cpp).
#include <cstdint>

namespace wf::kernels::cpu {

// How many of x[0..n) differ from `value`.
std::int64_t count_not_equal(std::int64_t n, const std::int64_t* x, std::int64_t value);
std::int64_t count_not_equal_reference(std::int64_t n, const std::int64_t* x, std::int64_t value);

// totals = [loss sum, count]: out = [1 / count (0 when count is 0), sum · out[0]]. The same
// arithmetic the host did (normalise_gradients): the mean is sum times the reciprocal, not sum / count.
void loss_normaliser(const double* totals, double* out);
void loss_normaliser_reference(const double* totals, double* out);

}  // namespace wf::kernels::cpu
