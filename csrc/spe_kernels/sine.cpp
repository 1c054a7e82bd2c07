// CPU kernels of the sineSPE code (spe/sine.py is the reference); bound in contract.cpp.
#include "common.h"

#include <algorithm>
#include <vector>

namespace spe_detail {

// sineSPE code: code[s, h, d, r] = sum_j omega[s, h, d, j] z[h, d, j, r], written straight into
// the (S, H, D, R) layout the contraction reads (no (H, D, S, R) intermediate and no permuted copy).
at::Tensor sine_code(const at::Tensor& omega, const at::Tensor& z) {
  TORCH_CHECK(omega.device().is_cpu() && omega.dim() == 4 && omega.is_contiguous(),
              "omega must be a contiguous (S, H, D, J) CPU tensor");
  TORCH_CHECK(z.dim() == 4 && z.is_contiguous() && z.scalar_type() == omega.scalar_type() &&
              z.size(0) == omega.size(1) && z.size(1) == omega.size(2) && z.size(2) == omega.size(3),
              "z must be a contiguous (H, D, J, R) tensor matching omega ", omega.sizes());
  const int64_t S = omega.size(0), H = omega.size(1), D = omega.size(2), J = omega.size(3), R = z.size(3);
  auto out = at::empty({S, H, D, R}, omega.options());
  dispatch(omega, [&](auto zero) {
    using scalar_t = decltype(zero);
    const scalar_t* op = omega.data_ptr<scalar_t>();
    const scalar_t* zp = z.data_ptr<scalar_t>();
    scalar_t* cp = out.data_ptr<scalar_t>();
    at::parallel_for(0, S * H * D, 256, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {  // i = (s, h, d); (h, d) = i % (H D)
        const scalar_t* w = op + i * J;
        const scalar_t* zb = zp + (i % (H * D)) * J * R;
        scalar_t* __restrict__ row = cp + i * R;
        std::fill(row, row + R, scalar_t(0));
        for (int64_t j = 0; j < J; ++j) {
          const scalar_t v = w[j];
          const scalar_t* __restrict__ zr = zb + j * R;
#pragma omp simd
          for (int64_t r = 0; r < R; ++r) row[r] += v * zr[r];
        }
      }
    });
  });
  return out;
}

// Gradients of sine_code for a code gradient g (S, H, D, R): grad_omega = g z^T (S, H, D, J) and
// grad_z = sum_s omega^T g (H, D, J, R). Parallel over (h, d) so that grad_z needs no reduction
// across threads; g is read once.
std::vector<at::Tensor> sine_code_backward(const at::Tensor& g, const at::Tensor& omega, const at::Tensor& z) {
  TORCH_CHECK(g.dim() == 4 && g.is_contiguous() && g.scalar_type() == omega.scalar_type() &&
              g.size(0) == omega.size(0) && g.size(1) == omega.size(1) && g.size(2) == omega.size(2) &&
              g.size(3) == z.size(3), "grad must be a contiguous (S, H, D, R) tensor matching the code");
  const int64_t S = omega.size(0), H = omega.size(1), D = omega.size(2), J = omega.size(3), R = z.size(3);
  auto grad_omega = at::empty_like(omega);
  auto grad_z = at::zeros_like(z);
  dispatch(omega, [&](auto zero) {
    using scalar_t = decltype(zero);
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const scalar_t* op = omega.data_ptr<scalar_t>();
    const scalar_t* zp = z.data_ptr<scalar_t>();
    scalar_t* gop = grad_omega.data_ptr<scalar_t>();
    scalar_t* gzp = grad_z.data_ptr<scalar_t>();
    at::parallel_for(0, H * D, 1, [&](int64_t begin, int64_t end) {
      for (int64_t hd = begin; hd < end; ++hd) {
        const scalar_t* zb = zp + hd * J * R;
        scalar_t* gzb = gzp + hd * J * R;
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = s * H * D + hd;
          const scalar_t* __restrict__ grow = gp + i * R;
          const scalar_t* w = op + i * J;
          for (int64_t j = 0; j < J; ++j) {
            const scalar_t* __restrict__ zr = zb + j * R;
            scalar_t* __restrict__ gz = gzb + j * R;
            const scalar_t v = w[j];
            scalar_t sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t r = 0; r < R; ++r) {
              sum += grow[r] * zr[r];
              gz[r] += v * grow[r];
            }
            gop[i * J + j] = sum;
          }
        }
      }
    });
  });
  return {grad_omega, grad_z};
}

}  // namespace spe_detail
