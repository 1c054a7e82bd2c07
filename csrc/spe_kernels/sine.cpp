// CPU kernels of the sineSPE code (spe/sine.py is the reference); bound in contract.cpp.
#include "common.h"
#include "half.h"
#include "rows.h"
#include "trig.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace spe_detail {

// omega (S, H, D, J) and z (H, D, J, R): contiguous CPU tensors of one dtype whose (H, D, J) agree.
inline void check_factors(const at::Tensor& omega, const at::Tensor& z) {
  TORCH_CHECK(omega.device().is_cpu() && omega.dim() == 4 && omega.is_contiguous(),
              "omega must be a contiguous (S, H, D, J) CPU tensor");
  TORCH_CHECK(z.dim() == 4 && z.is_contiguous() && z.scalar_type() == omega.scalar_type() &&
              z.size(0) == omega.size(1) && z.size(1) == omega.size(2) && z.size(2) == omega.size(3),
              "z must be a contiguous (H, D, J, R) tensor matching omega ", omega.sizes());
}

// sineSPE's features at positions start .. start + L - 1, float32 (spe/sine.py `SineSPE._omegas` is
// the reference): omega_k[l, h, d, 2k] and [.., 2k + 1] are the cosine and sine of 2 pi c with
// c = frac(f[h, d, k] (start + l)) taken in float64 (far positions keep their phase), omega_q the same
// of 2 pi c + theta[h, d, k]. freqs (H, D, K) float64, offsets theta (H, D, K) float32. One pass that
// writes both (L, H, D, 2K) tensors, instead of the reference's dozen full-size temporaries.
std::vector<at::Tensor> sine_omegas(const at::Tensor& freqs, const at::Tensor& offsets, int64_t start, int64_t length) {
  TORCH_CHECK(freqs.device().is_cpu() && freqs.dim() == 3 && freqs.scalar_type() == at::kDouble,
              "freqs must be an (H, D, K) float64 CPU tensor, got ", freqs.sizes());
  TORCH_CHECK(offsets.device().is_cpu() && offsets.sizes() == freqs.sizes() && offsets.scalar_type() == at::kFloat,
              "offsets must be an (H, D, K) float32 CPU tensor like freqs, got ", offsets.sizes());
  TORCH_CHECK(start >= 0 && length >= 1, "positions must start at >= 0 and number >= 1, got ", start, " and ", length);
  const at::Tensor f = freqs.contiguous(), theta = offsets.contiguous();
  const int64_t H = f.size(0), D = f.size(1), K = f.size(2), n = H * D * K;
  at::Tensor omega_q = at::empty({length, H, D, 2 * K}, theta.options());
  at::Tensor omega_k = at::empty({length, H, D, 2 * K}, theta.options());
  const double* fp = f.data_ptr<double>();
  const float* tp = theta.data_ptr<float>();
  std::vector<double> shift(n);  // theta in turns
  for (int64_t i = 0; i < n; ++i) shift[i] = double(tp[i]) / (2.0 * M_PI);
  float* qp = omega_q.data_ptr<float>();
  float* kp = omega_k.data_ptr<float>();
  at::parallel_for(0, length, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> vq(n), vk(n);  // one position's turns, in [0, 1]
    for (int64_t l = begin; l < end; ++l) {
      const double position = double(start + l);
      for (int64_t i = 0; i < n; ++i) {
        const double c = fp[i] * position, turns = c - std::floor(c), q = turns + shift[i];
        vk[i] = float(turns);
        vq[i] = float(q - std::floor(q));
      }
      float* __restrict__ oq = qp + l * 2 * n;
      float* __restrict__ ok = kp + l * 2 * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        float cs, sn;
        turn(vk[i], cs, sn);
        ok[2 * i] = cs;
        ok[2 * i + 1] = sn;
        turn(vq[i], cs, sn);
        oq[2 * i] = cs;
        oq[2 * i + 1] = sn;
      }
    }
  });
  return {omega_q, omega_k};
}

// sineSPE code: code[s, h, d, r] = sum_j omega[s, h, d, j] z[h, d, j, r], written straight into
// the (S, H, D, R) layout the contraction reads (no (H, D, S, R) intermediate and no permuted copy),
// a new tensor or `out` (contiguous, reused from an earlier call: no fresh pages to fault in; float16
// for float32 factors: the code stored in half precision, rounded as torch rounds).
at::Tensor sine_code(const at::Tensor& omega, const at::Tensor& z, c10::optional<at::Tensor> out_arg) {
  check_factors(omega, z);
  const int64_t S = omega.size(0), H = omega.size(1), D = omega.size(2), J = omega.size(3), R = z.size(3);
  at::Tensor out;
  if (out_arg.has_value() && out_arg->defined()) {
    out = *out_arg;
    const bool half = out.scalar_type() == at::kHalf && omega.scalar_type() == at::kFloat;
    TORCH_CHECK(out.device().is_cpu() && (out.scalar_type() == omega.scalar_type() || half) && out.is_contiguous() &&
                out.dim() == 4 && out.size(0) == S && out.size(1) == H && out.size(2) == D && out.size(3) == R,
                "out must be a contiguous (", S, ", ", H, ", ", D, ", ", R, ") tensor of omega's dtype (or float16 "
                "for float32 omegas), got ", out.scalar_type(), " ", out.sizes());
  } else {
    out = at::empty({S, H, D, R}, omega.options());
  }
  dispatch_rows(omega, R, [&](auto zero, auto kr) {
    using scalar_t = decltype(zero);
    constexpr int64_t KR = decltype(kr)::value;
    const scalar_t* op = omega.data_ptr<scalar_t>();
    const scalar_t* zp = z.data_ptr<scalar_t>();
    if (out.scalar_type() == at::kHalf) {  // float32 omegas (checked): each row formed in float, stored half
      if constexpr (std::is_same<scalar_t, float>::value) {
        at::Half* hp = out.data_ptr<at::Half>();
        at::parallel_for(0, S * H * D, 256, [&](int64_t begin, int64_t end) {
          std::vector<float> row(R);
          for (int64_t i = begin; i < end; ++i)
            write_combination_half<KR>(hp + i * R, op + i * J, zp + (i % (H * D)) * J * R, J, R, row.data());
          stream_fence();
        });
      }
      return;
    }
    scalar_t* cp = out.data_ptr<scalar_t>();
    at::parallel_for(0, S * H * D, 256, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)  // i = (s, h, d); (h, d) = i % (H D)
        write_combination<scalar_t, KR>(cp + i * R, op + i * J, zp + (i % (H * D)) * J * R, J, R);
      stream_fence();
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
            row_dots<scalar_t, KR>(gop + i * J, grow, zp + hd * J * R, J, R);
            add_scaled_row<scalar_t, KR>(gzp + hd * J * R, op + i * J, 1, grow, J, R);
          }
        }
      }
    });
  });
  return {grad_omega, grad_z};
}

namespace {

// The pass shared by sine_pairs_backward and sine_pairs_phase_backward: forms each (s, h) block of
// G = sum_t (x_t scale_t)^T g_t in cache, adds omega^T G into grad_z and hands g z^T (the gradient of
// omega[s, h, d], J values) to sink(chunk, s, hd, dots).
//
// Each thread takes a range of positions, kTile at a time. A tile's rows of every head are first
// copied into a local buffer in the order of their memory (gather_pairs_tile: one head at a time,
// they were short rows pages apart in two dozen tensors, and the reads waited on the TLB). The tile is
// then taken one head at a time, G of each of its positions formed four rows at a time in registers
// (block_rows), and within it one d at a time: the rows G[s, h, d] of the tile's positions sit
// together in cache, so that grad_z[h, d] (J x R, a partial sum per thread) is read and written once
// per tile, not once per position.
template <typename scalar_t, typename Sink>
void pairs_backward(at::Tensor& grad_z, const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& gs,
                    const std::vector<c10::optional<at::Tensor>>& scales, const at::Tensor& omega,
                    const at::Tensor& z, int64_t chunks, Sink sink) {
  const int64_t S = omega.size(0), H = omega.size(1), D = omega.size(2), J = omega.size(3), R = z.size(3);
  const std::vector<at::Tensor> scale = check_pairs(xs, gs, scales, omega, R);
  int64_t n = 0;  // rows of all triples together
  for (const auto& x : xs) n += x.size(0);
  constexpr int64_t kTile = 32;  // positions per tile (8-64 measured: bench/README.md)
  // a partial grad_z per chunk of positions, added at the end (fixed bounds: the sum does not
  // depend on scheduling)
  at::Tensor parts = at::zeros({chunks, H, D, J, R}, z.options());
  dispatch_rows(omega, R, [&](auto zero, auto kr) {
    if constexpr (std::is_same_v<decltype(zero), scalar_t>) {  // omega's dtype: the caller's scalar_t
      constexpr int64_t KR = decltype(kr)::value;
      const scalar_t* op = omega.data_ptr<scalar_t>();
      const scalar_t* zp = z.data_ptr<scalar_t>();
      at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
        // the tile's rows: (position, head) -> grad rows (n, R) and scaled x rows (n, D); G of one head
        // (D, tile positions, R)
        std::vector<scalar_t> rows(kTile * H * n * R), xv(kTile * H * n * D), blocks(D * kTile * R), dots(J);
        for (int64_t k = chunk_begin; k < chunk_end; ++k) {
          scalar_t* part = parts.data_ptr<scalar_t>() + k * H * D * J * R;
          for (int64_t s0 = S * k / chunks; s0 < S * (k + 1) / chunks; s0 += kTile) {
            const int64_t count = std::min(kTile, S * (k + 1) / chunks - s0);
            gather_pairs_tile(xs, gs, scale, s0, count, rows.data(), xv.data());
            for (int64_t h = 0; h < H; ++h) {
              for (int64_t t = 0; t < count; ++t)  // G[s0 + t, h, d] at blocks[d, t]
                block_rows<scalar_t, KR>(blocks.data() + t * R, count * R, xv.data() + (t * H + h) * n * D,
                                         rows.data() + (t * H + h) * n * R, n, D, R);
              for (int64_t d = 0; d < D; ++d) {
                const int64_t hd = h * D + d;
                const scalar_t* grows = blocks.data() + d * count * R;  // G[s0 .. s0 + count, h, d]
                for (int64_t t = 0; t < count; ++t) {
                  row_dots<scalar_t, KR>(dots.data(), grows + t * R, zp + hd * J * R, J, R);
                  sink(k, s0 + t, hd, dots.data());
                }
                // grad_z[h, d, j] += sum_t omega[s0 + t, h, d, j] G[s0 + t, h, d]
                for (int64_t j = 0; j < J; ++j)
                  add_combination<scalar_t, KR>(part + (hd * J + j) * R, op + (s0 * H * D + hd) * J + j, H * D * J,
                                                grows, count, R);
              }
            }
          }
        }
      });
    }
  });
  grad_z.add_(parts.sum(0));
}

void check_pair_gradients(const at::Tensor& omega, const at::Tensor& z, const at::Tensor& grad_z) {
  check_factors(omega, z);
  TORCH_CHECK(grad_z.sizes() == z.sizes() && grad_z.is_contiguous() && grad_z.scalar_type() == z.scalar_type(),
              "grad_z must be a contiguous tensor like z");
}

int64_t position_chunks(const at::Tensor& omega) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), omega.size(0)));
}

}  // namespace

// The gradients of sine_code for the code gradient G = sum_t (x_t scale_t)^T g_t of several
// contraction calls (the layers' (x, grad, scale) triples), added into grad_omega (S, H, D, J) and
// grad_z (H, D, J, R) without G ever being stored (pairs_backward). omega and grad_omega may be
// prefixes (S' <= S positions) of longer contiguous tensors.
void sine_pairs_backward(at::Tensor& grad_omega, at::Tensor& grad_z, const std::vector<at::Tensor>& xs,
                         const std::vector<at::Tensor>& gs, const std::vector<c10::optional<at::Tensor>>& scales,
                         const at::Tensor& omega, const at::Tensor& z) {
  check_pair_gradients(omega, z, grad_z);
  TORCH_CHECK(grad_omega.sizes() == omega.sizes() && grad_omega.is_contiguous() &&
              grad_omega.scalar_type() == omega.scalar_type(), "grad_omega must be a contiguous tensor like omega");
  const int64_t J = omega.size(3);
  dispatch(omega, [&](auto zero) {
    using scalar_t = decltype(zero);
    scalar_t* gop = grad_omega.data_ptr<scalar_t>();
    const int64_t HD = omega.size(1) * omega.size(2);
    pairs_backward<scalar_t>(grad_z, xs, gs, scales, omega, z, position_chunks(omega),
                   [&](int64_t, int64_t s, int64_t hd, const scalar_t* dots) {
                     scalar_t* go = gop + (s * HD + hd) * J;
                     for (int64_t j = 0; j < J; ++j) go[j] += dots[j];
                   });
  });
}

// The same, with omega's gradient taken on to its phases, omega[.., 2k] and [.., 2k + 1] being the
// cosine and sine of phi[s, h, d, k]: d loss / d phi = g_sin cos - g_cos sin, summed over the positions
// into sums[0] and, weighted by the position's index s, into sums[1] (sums (2, H, D, K) float64, added
// to). What sineSPE's frequencies and offsets need (spe/shared.py), without omega's gradient ever
// stored.
void sine_pairs_phase_backward(at::Tensor& sums, at::Tensor& grad_z, const std::vector<at::Tensor>& xs,
                               const std::vector<at::Tensor>& gs, const std::vector<c10::optional<at::Tensor>>& scales,
                               const at::Tensor& omega, const at::Tensor& z) {
  check_pair_gradients(omega, z, grad_z);
  const int64_t H = omega.size(1), D = omega.size(2), J = omega.size(3), K = J / 2;
  TORCH_CHECK(J % 2 == 0, "omega must hold (cos, sin) pairs in its last dimension, got ", J, " values");
  TORCH_CHECK(sums.device().is_cpu() && sums.scalar_type() == at::kDouble && sums.is_contiguous() &&
              sums.dim() == 4 && sums.size(0) == 2 && sums.size(1) == H && sums.size(2) == D && sums.size(3) == K,
              "sums must be a contiguous (2, H, D, K) float64 CPU tensor, got ", sums.sizes());
  const int64_t chunks = position_chunks(omega);
  at::Tensor parts = at::zeros({chunks, 2, H * D, K}, sums.options());  // per chunk of positions
  double* pp = parts.data_ptr<double>();
  dispatch(omega, [&](auto zero) {
    using scalar_t = decltype(zero);
    const scalar_t* op = omega.data_ptr<scalar_t>();
    pairs_backward<scalar_t>(grad_z, xs, gs, scales, omega, z, chunks,
                   [&](int64_t chunk, int64_t s, int64_t hd, const scalar_t* dots) {
                     const scalar_t* w = op + (s * H * D + hd) * J;  // (cos, sin) pairs
                     double* plain = pp + (chunk * 2 * H * D + hd) * K;
                     double* weighted = plain + H * D * K;
                     for (int64_t k = 0; k < K; ++k) {
                       const double phase = double(dots[2 * k + 1] * w[2 * k] - dots[2 * k] * w[2 * k + 1]);
                       plain[k] += phase;
                       weighted[k] += double(s) * phase;
                     }
                   });
  });
  sums.add_(parts.sum(0).view({2, H, D, K}));
}

}  // namespace spe_detail
