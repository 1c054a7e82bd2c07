// CPU kernels of the sineSPE code (spe/sine.py is the reference); bound in contract.cpp.
#include "common.h"
#include "rows.h"

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
  dispatch_rows(omega, R, [&](auto zero, auto kr) {
    using scalar_t = decltype(zero);
    constexpr int64_t KR = decltype(kr)::value;
    const scalar_t* op = omega.data_ptr<scalar_t>();
    const scalar_t* zp = z.data_ptr<scalar_t>();
    scalar_t* cp = out.data_ptr<scalar_t>();
    at::parallel_for(0, S * H * D, 256, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {  // i = (s, h, d); (h, d) = i % (H D)
        scalar_t* row = cp + i * R;
        std::fill(row, row + R, scalar_t(0));
        add_combination<scalar_t, KR>(row, op + i * J, 1, zp + (i % (H * D)) * J * R, J, R);
      }
    });
  });
  return out;
}

// Gradients of sine_code for a code gradient g (S, H, D, R): grad_omega = g z^T (S, H, D, J) and
// grad_z = sum_s omega^T g (H, D, J, R). Each thread owns a range of (h, d) rows, so that grad_z needs
// no reduction across threads, and takes them D at a time (z and grad_z of D rows stay in cache)
// through all positions: at each s it reads those rows of g as one contiguous run (not one row per
// page, as a loop over s inside each (h, d) row would).
std::vector<at::Tensor> sine_code_backward(const at::Tensor& g, const at::Tensor& omega, const at::Tensor& z) {
  TORCH_CHECK(g.dim() == 4 && g.is_contiguous() && g.scalar_type() == omega.scalar_type() &&
              g.size(0) == omega.size(0) && g.size(1) == omega.size(1) && g.size(2) == omega.size(2) &&
              g.size(3) == z.size(3), "grad must be a contiguous (S, H, D, R) tensor matching the code");
  const int64_t S = omega.size(0), H = omega.size(1), D = omega.size(2), J = omega.size(3), R = z.size(3);
  auto grad_omega = at::empty_like(omega);
  auto grad_z = at::zeros_like(z);
  dispatch_rows(omega, R, [&](auto zero, auto kr) {
    using scalar_t = decltype(zero);
    constexpr int64_t KR = decltype(kr)::value;
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const scalar_t* op = omega.data_ptr<scalar_t>();
    const scalar_t* zp = z.data_ptr<scalar_t>();
    scalar_t* gop = grad_omega.data_ptr<scalar_t>();
    scalar_t* gzp = grad_z.data_ptr<scalar_t>();
    at::parallel_for(0, H * D, D, [&](int64_t begin, int64_t end) {
      for (int64_t first = begin; first < end; first += D) {  // D rows at a time: z, grad_z in cache
        for (int64_t s = 0; s < S; ++s) {
          for (int64_t hd = first; hd < std::min(first + D, end); ++hd) {
            const int64_t i = s * H * D + hd;
            const scalar_t* grow = gp + i * R;
            dot_rows<scalar_t, KR>(gop + i * J, 1, grow, zp + hd * J * R, J, R);
            add_scaled_row<scalar_t, KR>(gzp + hd * J * R, op + i * J, 1, grow, J, R);
          }
        }
      }
    });
  });
  return {grad_omega, grad_z};
}

}  // namespace spe_detail
