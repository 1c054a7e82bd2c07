// CPU kernels of SPE's per-position code contraction (spe/contract.py is the reference) and of the
// sineSPE code itself (spe/sine.py is the reference).
//
//   forward:    out[b, s, h, r]  = sum_d x[b, s, h, d] code[s, h, d, r]
//   backward:   gx[b, s, h, d]   = sum_r g[b, s, h, r] code[s, h, d, r]
//   accumulate: buf[s, h, d, r] += sum_t sum_b x_t[b, s, h, d] g_t[b, s, h, r]   (several calls at once)
//
// code and buf are contiguous (S, H, D, R); x and g may have any strides. Each (s, h) block of the
// code (D x R) is read once per call and reused for every batch row while it sits in cache, which
// is what torch.bmm cannot do well for the tiny per-position (B x D) @ (D x R) products.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace {

constexpr int64_t kGrain = 16;  // (s, h) blocks per parallel task

// Calls f(scalar_t{}) for the float32 / float64 tensor t (a plain function, not AT_DISPATCH: the
// loops below carry pragmas, which cannot stand inside a macro argument).
template <typename F>
void dispatch(const at::Tensor& t, F f) {
  if (t.scalar_type() == at::kFloat) {
    f(float(0));
  } else if (t.scalar_type() == at::kDouble) {
    f(double(0));
  } else {
    TORCH_CHECK(false, "spe_kernels support float32 and float64, got ", t.scalar_type());
  }
}

void check_code(const at::Tensor& code, const char* name) {
  TORCH_CHECK(code.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(code.dim() == 4 && code.is_contiguous(), name, " must be a contiguous (S, H, D, R) tensor");
}

void check_rows(const at::Tensor& t, const at::Tensor& code, int64_t last, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 4, name, " must be a (B, S, H, *) CPU tensor");
  TORCH_CHECK(t.scalar_type() == code.scalar_type(), name, " and the code must have the same dtype");
  TORCH_CHECK(t.size(1) == code.size(0) && t.size(2) == code.size(1) && t.size(3) == last, name,
              " has shape ", t.sizes(), ", which does not match the code ", code.sizes());
}

at::Tensor contract_forward(const at::Tensor& x, const at::Tensor& code) {
  check_code(code, "code");
  check_rows(x, code, code.size(2), "x");
  const int64_t B = x.size(0), S = code.size(0), H = code.size(1), D = code.size(2), R = code.size(3);
  auto out = at::empty({B, S, H, R}, code.options());
  dispatch(code, [&](auto zero) {
    using scalar_t = decltype(zero);
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* cp = code.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t xb = x.stride(0), xs = x.stride(1), xh = x.stride(2), xd = x.stride(3);
    at::parallel_for(0, S * H, kGrain, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> acc(B * R);
      for (int64_t i = begin; i < end; ++i) {
        const int64_t s = i / H, h = i % H;
        const scalar_t* c = cp + i * D * R;
        std::fill(acc.begin(), acc.end(), scalar_t(0));
        for (int64_t d = 0; d < D; ++d) {
          const scalar_t* __restrict__ row = c + d * R;
          for (int64_t b = 0; b < B; ++b) {
            const scalar_t v = xp[b * xb + s * xs + h * xh + d * xd];
            scalar_t* __restrict__ a = acc.data() + b * R;
#pragma omp simd
            for (int64_t r = 0; r < R; ++r) a[r] += v * row[r];
          }
        }
        for (int64_t b = 0; b < B; ++b) {
          std::copy(acc.data() + b * R, acc.data() + (b + 1) * R, op + ((b * S + s) * H + h) * R);
        }
      }
    });
  });
  return out;
}

// gx = sum_r g code. Each code block is first transposed to (R, D) in a local buffer, so that the
// product is vectorised along the contiguous dimension.
at::Tensor contract_backward(const at::Tensor& g, const at::Tensor& code) {
  check_code(code, "code");
  check_rows(g, code, code.size(3), "grad");
  const int64_t B = g.size(0), S = code.size(0), H = code.size(1), D = code.size(2), R = code.size(3);
  auto out = at::empty({B, S, H, D}, code.options());
  dispatch(code, [&](auto zero) {
    using scalar_t = decltype(zero);
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const scalar_t* cp = code.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t gb = g.stride(0), gs = g.stride(1), gh = g.stride(2), gr = g.stride(3);
    at::parallel_for(0, S * H, kGrain, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> ct(R * D);  // this block's code, transposed (R, D)
      std::vector<scalar_t> acc(D);
      for (int64_t i = begin; i < end; ++i) {
        const int64_t s = i / H, h = i % H;
        const scalar_t* c = cp + i * D * R;
        for (int64_t d = 0; d < D; ++d)
          for (int64_t r = 0; r < R; ++r) ct[r * D + d] = c[d * R + r];
        for (int64_t b = 0; b < B; ++b) {
          const scalar_t* grow = gp + b * gb + s * gs + h * gh;
          std::fill(acc.begin(), acc.end(), scalar_t(0));
          for (int64_t r = 0; r < R; ++r) {
            const scalar_t v = grow[r * gr];
            const scalar_t* __restrict__ col = ct.data() + r * D;
            scalar_t* __restrict__ a = acc.data();
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) a[d] += v * col[d];
          }
          std::copy(acc.begin(), acc.end(), op + ((b * S + s) * H + h) * D);
        }
      }
    });
  });
  return out;
}

// buf += sum_t sum_b x_t^T g_t: the code gradients of several calls (layers), gathered per block so
// that the buffer is read and written once for all of them.
void contract_accumulate(at::Tensor& buf, const std::vector<at::Tensor>& xs,
                         const std::vector<at::Tensor>& gs) {
  check_code(buf, "buf");
  TORCH_CHECK(xs.size() == gs.size(), "accumulate needs as many x as grad tensors");
  for (size_t t = 0; t < xs.size(); ++t) {
    check_rows(xs[t], buf, buf.size(2), "x");
    check_rows(gs[t], buf, buf.size(3), "grad");
    TORCH_CHECK(xs[t].size(0) == gs[t].size(0), "x and grad must have the same batch size");
  }
  const int64_t S = buf.size(0), H = buf.size(1), D = buf.size(2), R = buf.size(3);
  int64_t rows_total = 0;
  for (const auto& x : xs) rows_total += x.size(0);
  dispatch(buf, [&](auto zero) {
    using scalar_t = decltype(zero);
    scalar_t* bp = buf.data_ptr<scalar_t>();
    at::parallel_for(0, S * H, kGrain, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> rows(rows_total * R);  // grad rows of this block, all calls, (n, R)
      std::vector<scalar_t> xv(D * rows_total);    // x values of this block, transposed (D, n)
      for (int64_t i = begin; i < end; ++i) {
        const int64_t s = i / H, h = i % H;
        int64_t k = 0;
        for (size_t t = 0; t < xs.size(); ++t) {
          const at::Tensor& x = xs[t];
          const at::Tensor& g = gs[t];
          const scalar_t* xp = x.data_ptr<scalar_t>() + s * x.stride(1) + h * x.stride(2);
          const scalar_t* gp = g.data_ptr<scalar_t>() + s * g.stride(1) + h * g.stride(2);
          for (int64_t b = 0; b < x.size(0); ++b, ++k) {
            for (int64_t r = 0; r < R; ++r) rows[k * R + r] = gp[b * g.stride(0) + r * g.stride(3)];
            for (int64_t d = 0; d < D; ++d) xv[d * rows_total + k] = xp[b * x.stride(0) + d * x.stride(3)];
          }
        }
        scalar_t* blk = bp + i * D * R;
        for (int64_t d = 0; d < D; ++d) {
          scalar_t* __restrict__ out = blk + d * R;
          for (int64_t n = 0; n < rows_total; ++n) {
            const scalar_t v = xv[d * rows_total + n];
            const scalar_t* __restrict__ grow = rows.data() + n * R;
#pragma omp simd
            for (int64_t r = 0; r < R; ++r) out[r] += v * grow[r];
          }
        }
      }
    });
  });
}

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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "CPU kernels of SPE's per-position code contraction";
  m.def("forward", &contract_forward, "out[b,s,h,r] = sum_d x[b,s,h,d] code[s,h,d,r]");
  m.def("backward", &contract_backward, "gx[b,s,h,d] = sum_r g[b,s,h,r] code[s,h,d,r]");
  m.def("sine_code", &sine_code, "code[s,h,d,r] = sum_j omega[s,h,d,j] z[h,d,j,r]");
  m.def("sine_code_backward", &sine_code_backward, "(grad_omega, grad_z) of sine_code");
  m.def("accumulate", &contract_accumulate, "buf[s,h,d,r] += sum_t sum_b x_t[b,s,h,d] g_t[b,s,h,r]");
}
