// CPU kernels of SPE's per-position code contraction (spe/contract.py is the reference), plain and
// gated, and the module's bindings (the sineSPE code kernels are in sine.cpp, convSPE's layout
// kernel in layout.cpp).
//
//   forward:    out[b, s, h, r]  = sum_d x[b, s, h, d] code[s, h, d, r]
//   backward:   gx[b, s, h, d]   = sum_r g[b, s, h, r] code[s, h, d, r]
//   accumulate: buf[s, h, d, r] += sum_t sum_b x_t[b, s, h, d] g_t[b, s, h, r]   (several calls at once)
//
// code and buf are contiguous (S, H, D, R); x and g may have any strides. Each (s, h) block of the
// code (D x R) is read once per call and reused for every batch row while it sits in cache, which
// is what torch.bmm cannot do well for the tiny per-position (B x D) @ (D x R) products.
#include "common.h"

#include <algorithm>
#include <vector>

namespace spe_detail {

at::Tensor sine_code(const at::Tensor& omega, const at::Tensor& z);                      // sine.cpp
std::vector<at::Tensor> sine_code_backward(const at::Tensor& g, const at::Tensor& omega, const at::Tensor& z);
at::Tensor swap_outer(const at::Tensor& x, c10::optional<at::Tensor> out);                   // layout.cpp

namespace {

// The gate of a gated call: out = sum_d x_d (a_d code_d + c_d noise_d). Either all three tensors
// (a, c: (H, D), noise: (H, D, R), contiguous) or none (the ungated contraction).
struct GateTensors {
  at::Tensor a, c, noise;
  bool on = false;
};

GateTensors check_gate(const c10::optional<at::Tensor>& a, const c10::optional<at::Tensor>& c,
                       const c10::optional<at::Tensor>& noise, const at::Tensor& code) {
  GateTensors gate;
  const bool has_a = a.has_value() && a->defined(), has_c = c.has_value() && c->defined();
  const bool has_n = noise.has_value() && noise->defined();
  TORCH_CHECK(has_a == has_c && has_c == has_n, "a gate needs all of a, c and noise, or none of them");
  if (!has_a) return gate;
  gate.on = true;
  gate.a = a->contiguous();
  gate.c = c->contiguous();
  gate.noise = noise->contiguous();
  check_gate_hd(gate.a, code, "a");
  check_gate_hd(gate.c, code, "c");
  TORCH_CHECK(gate.noise.device().is_cpu() && gate.noise.scalar_type() == code.scalar_type() &&
              gate.noise.dim() == 3 && gate.noise.size(0) == code.size(1) &&
              gate.noise.size(1) == code.size(2) && gate.noise.size(2) == code.size(3),
              "noise must be an (H, D, R) CPU tensor of the code's dtype, got ", gate.noise.sizes());
  return gate;
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
// With scales (one (H, D) tensor or None per pair), x_t is read as x_t[b, s, h, d] scale_t[h, d]: the
// code gradient of a gated call (x a)^T g without an (x a) tensor.
void contract_accumulate_scaled(at::Tensor& buf, const std::vector<at::Tensor>& xs,
                                const std::vector<at::Tensor>& gs,
                                const std::vector<c10::optional<at::Tensor>>& scales) {
  check_code(buf, "buf");
  TORCH_CHECK(xs.size() == gs.size(), "accumulate needs as many x as grad tensors");
  TORCH_CHECK(scales.empty() || scales.size() == xs.size(), "accumulate needs one scale (or None) per x");
  std::vector<at::Tensor> scale(xs.size());  // contiguous (H, D), or undefined
  for (size_t t = 0; t < xs.size(); ++t) {
    check_rows(xs[t], buf, buf.size(2), "x");
    check_rows(gs[t], buf, buf.size(3), "grad");
    TORCH_CHECK(xs[t].size(0) == gs[t].size(0), "x and grad must have the same batch size");
    if (!scales.empty() && scales[t].has_value() && scales[t]->defined()) {
      scale[t] = scales[t]->contiguous();
      check_gate_hd(scale[t], buf, "scale");
    }
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
          const scalar_t* sc = scale[t].defined() ? scale[t].data_ptr<scalar_t>() + h * D : nullptr;
          for (int64_t b = 0; b < x.size(0); ++b, ++k) {
            for (int64_t r = 0; r < R; ++r) rows[k * R + r] = gp[b * g.stride(0) + r * g.stride(3)];
            for (int64_t d = 0; d < D; ++d) {
              const scalar_t v = xp[b * x.stride(0) + d * x.stride(3)];
              xv[d * rows_total + k] = sc ? v * sc[d] : v;
            }
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

// ---- Gated contraction: the effective block a code + c noise, never stored beyond one (s, h) ----
//
//   E[s, h, d, r] = a[h, d] code[s, h, d, r] + c[h, d] noise[h, d, r]   (the effective code)
//   forward:  out[b, s, h, r] = sum_d x[b, s, h, d] E[s, h, d, r]
//   backward: gx[b, s, h, d]  = sum_r g[b, s, h, r] E[s, h, d, r]
//             with P[s, h, d, r] = sum_b x[b, s, h, d] g[b, s, h, r] (one row of R at a time):
//             grad_a[h, d] = sum_{s, r} code P,  Psum[h, d, r] = sum_s P  (grad_c, grad_noise follow),
//             buf[s, h, d, r] += a[h, d] P  (the code gradient, in place)

template <typename scalar_t>
struct GatePtrs {
  const scalar_t *a = nullptr, *c = nullptr, *noise = nullptr;  // (H, D), (H, D), (H, D, R)
  explicit GatePtrs(const GateTensors& g) {
    if (g.on) {
      a = g.a.data_ptr<scalar_t>();
      c = g.c.data_ptr<scalar_t>();
      noise = g.noise.data_ptr<scalar_t>();
    }
  }
};

at::Tensor gated_forward(const at::Tensor& x, const at::Tensor& code, const c10::optional<at::Tensor>& a,
                         const c10::optional<at::Tensor>& c, const c10::optional<at::Tensor>& noise) {
  check_code(code, "code");
  check_rows(x, code, code.size(2), "x");
  const GateTensors gate = check_gate(a, c, noise, code);
  const int64_t B = x.size(0), S = code.size(0), H = code.size(1), D = code.size(2), R = code.size(3);
  auto out = at::empty({B, S, H, R}, code.options());
  dispatch(code, [&](auto zero) {
    using scalar_t = decltype(zero);
    const GatePtrs<scalar_t> gp(gate);
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* cp = code.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t xb = x.stride(0), xs = x.stride(1), xh = x.stride(2), xd = x.stride(3);
    at::parallel_for(0, S * H, kGrain, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> acc(B * R);
      std::vector<scalar_t> eff(gate.on ? D * R : 0);  // this block's effective code (D, R)
      for (int64_t i = begin; i < end; ++i) {
        const int64_t s = i / H, h = i % H;
        const scalar_t* blk = cp + i * D * R;
        if (gate.on) {
          for (int64_t d = 0; d < D; ++d) {
            const scalar_t ad = gp.a[h * D + d], cd = gp.c[h * D + d];
            const scalar_t* __restrict__ crow = blk + d * R;
            const scalar_t* __restrict__ nrow = gp.noise + (h * D + d) * R;
            scalar_t* __restrict__ erow = eff.data() + d * R;
#pragma omp simd
            for (int64_t r = 0; r < R; ++r) erow[r] = ad * crow[r] + cd * nrow[r];
          }
          blk = eff.data();
        }
        std::fill(acc.begin(), acc.end(), scalar_t(0));
        for (int64_t d = 0; d < D; ++d) {
          const scalar_t* __restrict__ row = blk + d * R;
          for (int64_t b = 0; b < B; ++b) {
            const scalar_t v = xp[b * xb + s * xs + h * xh + d * xd];
            scalar_t* __restrict__ o = acc.data() + b * R;
#pragma omp simd
            for (int64_t r = 0; r < R; ++r) o[r] += v * row[r];
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

// The plain contraction: the gated kernel without a gate (it then reads the code blocks directly).
at::Tensor contract_forward(const at::Tensor& x, const at::Tensor& code) {
  return gated_forward(x, code, c10::nullopt, c10::nullopt, c10::nullopt);
}

// One pass over (s, h) for everything the backward needs: [grad_x (B, S, H, D), grad_a (H, D),
// grad_c (H, D), grad_noise (H, D, R)], undefined where not asked for (the gate's three when ungated),
// and buf += a P when buf is given. The gate's sums are kept per chunk of blocks (one chunk per
// thread, fixed bounds: the result does not depend on scheduling) and added at the end.
std::vector<at::Tensor> gated_backward(const at::Tensor& g, const at::Tensor& x, const at::Tensor& code,
                                       const c10::optional<at::Tensor>& a, const c10::optional<at::Tensor>& c,
                                       const c10::optional<at::Tensor>& noise,
                                       const c10::optional<at::Tensor>& buf, bool need_x, bool need_gate) {
  check_code(code, "code");
  check_rows(g, code, code.size(3), "grad");
  check_rows(x, code, code.size(2), "x");
  TORCH_CHECK(x.size(0) == g.size(0), "x and grad must have the same batch size");
  const GateTensors gate = check_gate(a, c, noise, code);
  const bool add_buf = buf.has_value() && buf->defined();
  if (add_buf) {
    check_code(*buf, "buf");
    TORCH_CHECK(buf->sizes() == code.sizes() && buf->scalar_type() == code.scalar_type(),
                "buf must have the code's shape and dtype");
  }
  need_gate = need_gate && gate.on;
  const int64_t B = x.size(0), S = code.size(0), H = code.size(1), D = code.size(2), R = code.size(3);
  const int64_t blocks = S * H;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), blocks));
  at::Tensor grad_x = need_x ? at::empty({B, S, H, D}, code.options()) : at::Tensor();
  // per-chunk partial sums: grad_a (chunks, H, D) and Psum (chunks, H, D, R)
  at::Tensor part_a = need_gate ? at::zeros({chunks, H, D}, code.options()) : at::Tensor();
  at::Tensor part_p = need_gate ? at::zeros({chunks, H, D, R}, code.options()) : at::Tensor();
  const bool need_p = need_gate || add_buf;
  dispatch(code, [&](auto zero) {
    using scalar_t = decltype(zero);
    const GatePtrs<scalar_t> gp(gate);
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* gradp = g.data_ptr<scalar_t>();
    const scalar_t* cp = code.data_ptr<scalar_t>();
    scalar_t* gxp = need_x ? grad_x.data_ptr<scalar_t>() : nullptr;
    scalar_t* bp = add_buf ? buf->data_ptr<scalar_t>() : nullptr;
    scalar_t* pap = need_gate ? part_a.data_ptr<scalar_t>() : nullptr;
    scalar_t* ppp = need_gate ? part_p.data_ptr<scalar_t>() : nullptr;
    const int64_t xb = x.stride(0), xs = x.stride(1), xh = x.stride(2), xd = x.stride(3);
    const int64_t gb = g.stride(0), gs = g.stride(1), gh = g.stride(2), gr = g.stride(3);
    at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
      std::vector<scalar_t> grows(B * R);  // this block's grad rows (B, R)
      std::vector<scalar_t> xv(D * B);     // this block's x, transposed (D, B)
      std::vector<scalar_t> et(need_x ? R * D : 0);  // effective block, transposed (R, D)
      std::vector<scalar_t> acc(D);
      std::vector<scalar_t> prow(R);       // one row of P
      for (int64_t k = chunk_begin; k < chunk_end; ++k) {
        scalar_t* pa = need_gate ? pap + k * H * D : nullptr;
        scalar_t* pp = need_gate ? ppp + k * H * D * R : nullptr;
        for (int64_t i = blocks * k / chunks; i < blocks * (k + 1) / chunks; ++i) {
          const int64_t s = i / H, h = i % H;
          const scalar_t* blk = cp + i * D * R;
          for (int64_t b = 0; b < B; ++b) {
            const scalar_t* gsrc = gradp + b * gb + s * gs + h * gh;
            const scalar_t* xsrc = xp + b * xb + s * xs + h * xh;
            for (int64_t r = 0; r < R; ++r) grows[b * R + r] = gsrc[r * gr];
            for (int64_t d = 0; d < D; ++d) xv[d * B + b] = xsrc[d * xd];
          }
          if (need_x) {
            for (int64_t d = 0; d < D; ++d) {
              const scalar_t ad = gate.on ? gp.a[h * D + d] : scalar_t(1);
              const scalar_t cd = gate.on ? gp.c[h * D + d] : scalar_t(0);
              const scalar_t* nrow = gate.on ? gp.noise + (h * D + d) * R : nullptr;
              for (int64_t r = 0; r < R; ++r)
                et[r * D + d] = gate.on ? ad * blk[d * R + r] + cd * nrow[r] : blk[d * R + r];
            }
            for (int64_t b = 0; b < B; ++b) {
              std::fill(acc.begin(), acc.end(), scalar_t(0));
              for (int64_t r = 0; r < R; ++r) {
                const scalar_t v = grows[b * R + r];
                const scalar_t* __restrict__ col = et.data() + r * D;
                scalar_t* __restrict__ o = acc.data();
#pragma omp simd
                for (int64_t d = 0; d < D; ++d) o[d] += v * col[d];
              }
              std::copy(acc.begin(), acc.end(), gxp + ((b * S + s) * H + h) * D);
            }
          }
          if (!need_p) continue;
          for (int64_t d = 0; d < D; ++d) {
            scalar_t* __restrict__ p = prow.data();
            std::fill(prow.begin(), prow.end(), scalar_t(0));
            for (int64_t b = 0; b < B; ++b) {
              const scalar_t v = xv[d * B + b];
              const scalar_t* __restrict__ grow = grows.data() + b * R;
#pragma omp simd
              for (int64_t r = 0; r < R; ++r) p[r] += v * grow[r];
            }
            if (need_gate) {
              const scalar_t* __restrict__ crow = blk + d * R;
              scalar_t* __restrict__ psum = pp + (h * D + d) * R;
              scalar_t dot = 0;
#pragma omp simd reduction(+ : dot)
              for (int64_t r = 0; r < R; ++r) {
                dot += crow[r] * p[r];
                psum[r] += p[r];
              }
              pa[h * D + d] += dot;
            }
            if (add_buf) {
              const scalar_t ad = gate.on ? gp.a[h * D + d] : scalar_t(1);
              scalar_t* __restrict__ brow = bp + i * D * R + d * R;
#pragma omp simd
              for (int64_t r = 0; r < R; ++r) brow[r] += ad * p[r];
            }
          }
        }
      }
    });
  });
  at::Tensor grad_a, grad_c, grad_noise;
  if (need_gate) {
    grad_a = part_a.sum(0);                                   // (H, D)
    const at::Tensor psum = part_p.sum(0);                    // (H, D, R)
    grad_noise = psum * gate.c.unsqueeze(-1);                 // (H, D, R)
    grad_c = (psum * gate.noise).sum(-1);                     // (H, D)
  }
  return {grad_x, grad_a, grad_c, grad_noise};
}

}  // namespace
}  // namespace spe_detail

using namespace spe_detail;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "CPU kernels of SPE's per-position code contraction";
  m.def("forward", &contract_forward, "out[b,s,h,r] = sum_d x[b,s,h,d] code[s,h,d,r]");
  m.def("backward", &contract_backward, "gx[b,s,h,d] = sum_r g[b,s,h,r] code[s,h,d,r]");
  m.def("sine_code", &sine_code, "code[s,h,d,r] = sum_j omega[s,h,d,j] z[h,d,j,r]");
  m.def("sine_code_backward", &sine_code_backward, "(grad_omega, grad_z) of sine_code");
  m.def("swap_outer", &swap_outer, "out[b,c,a] = x[a,c,b]: (A, C, B) -> (B, C, A), new or into out",
        py::arg("x"), py::arg("out") = py::none());
  m.def("accumulate", &contract_accumulate_scaled,
        "buf[s,h,d,r] += sum_t sum_b x_t[b,s,h,d] (scale_t[h,d]) g_t[b,s,h,r]", py::arg("buf"), py::arg("xs"),
        py::arg("grads"), py::arg("scales") = std::vector<c10::optional<at::Tensor>>());
  m.def("gated_forward", &gated_forward,
        "out[b,s,h,r] = sum_d x[b,s,h,d] (a[h,d] code[s,h,d,r] + c[h,d] noise[h,d,r])",
        py::arg("x"), py::arg("code"), py::arg("a"), py::arg("c"), py::arg("noise"));
  m.def("gated_backward", &gated_backward,
        "[grad_x, grad_a, grad_c, grad_noise] of gated_forward (None where not needed); buf += a x^T g",
        py::arg("grad"), py::arg("x"), py::arg("code"), py::arg("a"), py::arg("c"), py::arg("noise"),
        py::arg("buf"), py::arg("need_x"), py::arg("need_gate"));
}
