// convSPE's filter gradient in the frequency domain (spe/conv.py `_correlations` is the reference):
//
//   out_t[c, f] = sum_r z[r, c, f] conj(g_t[r, c, f])     z, g_t: (R, c, F') complex spectra
//
// torch forms this as R - 1 in-place multiply-adds over an (c, F') accumulator, reading z again for
// every g_t; here each tile of kTileF frequencies keeps its sums in registers through all r, and z is
// read once for all the g_t.
#include "common.h"
#include "rows.h"

#include <algorithm>
#include <vector>

namespace spe_detail {

namespace {

constexpr int64_t kTileF = 32;  // complex values per tile
constexpr int kGroup = 2;       // spectra g_t per pass over z

// The sums of one tile of len complex values for the spectra gs[0 .. count), plainly: scalar_t* arrays
// of interleaved (re, im) pairs, rows of realisation r at offsets r * zr and r * grs[t].
template <typename scalar_t>
inline void correlate_values(const scalar_t* z, int64_t zr, const scalar_t* const* gs, const int64_t* grs,
                             scalar_t* const* outs, int count, int64_t R, int64_t len) {
  for (int t = 0; t < count; ++t) {
    scalar_t re[kTileF] = {}, im[kTileF] = {};
    for (int64_t r = 0; r < R; ++r) {
      const scalar_t* zrow = z + r * zr;
      const scalar_t* grow = gs[t] + r * grs[t];
      for (int64_t j = 0; j < len; ++j) {
        const scalar_t a = zrow[2 * j], b = zrow[2 * j + 1], c = grow[2 * j], d = grow[2 * j + 1];
        re[j] += a * c + b * d;  // (a + ib)(c - id)
        im[j] += b * c - a * d;
      }
    }
    for (int64_t j = 0; j < len; ++j) {
      outs[t][2 * j] = re[j];
      outs[t][2 * j + 1] = im[j];
    }
  }
}

// `correlate_values`, or for float a faster path where it applies.
template <typename scalar_t>
inline void correlate_tile(const scalar_t* z, int64_t zr, const scalar_t* const* gs, const int64_t* grs,
                           scalar_t* const* outs, int count, int64_t R, int64_t len) {
  correlate_values(z, zr, gs, grs, outs, count, R, len);
}

#if defined(__GNUC__) && !defined(__clang__) && !defined(SPE_NO_VECTOR_PATHS)
// The same for float and whole tiles (len == kTileF: 64 floats, four vectors per row): per g_t and
// vector, p = z g (lanes a c, b d) and q = z swap(g) (lanes a d, b c) summed over r; then
// re = p_even + p_odd and im = q_odd - q_even, interleaved.
template <>
inline void correlate_tile<float>(const float* z, int64_t zr, const float* const* gs, const int64_t* grs,
                                  float* const* outs, int count, int64_t R, int64_t len) {
  if (len != kTileF) {
    correlate_values(z, zr, gs, grs, outs, count, R, len);
    return;
  }
  Index16 swap, merge;  // swap: the lanes of each (re, im) pair exchanged; merge: even lanes of x, odd of y
  for (int i = 0; i < 16; ++i) {
    swap[i] = i ^ 1;
    merge[i] = i % 2 == 0 ? i : 16 + i;
  }
  Lanes16 p[kGroup][4] = {}, q[kGroup][4] = {};
  for (int64_t r = 0; r < R; ++r) {
    Lanes16 zv[4];
    load64(zv, z + r * zr);
    for (int t = 0; t < count; ++t)
      for (int v = 0; v < 4; ++v) {
        const Lanes16 g = load16(gs[t] + r * grs[t] + 16 * v);
        p[t][v] += zv[v] * g;
        q[t][v] += zv[v] * __builtin_shuffle(g, swap);
      }
  }
  for (int t = 0; t < count; ++t)
    for (int v = 0; v < 4; ++v) {
      const Lanes16 re = p[t][v] + __builtin_shuffle(p[t][v], swap);
      const Lanes16 im = q[t][v] - __builtin_shuffle(q[t][v], swap);
      const Lanes16 out = __builtin_shuffle(re, im, merge);
      __builtin_memcpy(outs[t] + 16 * v, &out, sizeof(out));
    }
}
#endif

}  // namespace

std::vector<at::Tensor> spectral_correlation(const at::Tensor& z, const std::vector<at::Tensor>& gs) {
  TORCH_CHECK(z.device().is_cpu() && z.dim() == 3 && z.stride(2) == 1 && z.stride(1) == z.size(2) &&
              (z.scalar_type() == at::kComplexFloat || z.scalar_type() == at::kComplexDouble),
              "z must be an (R, c, F) complex CPU tensor whose (c, F) planes are contiguous, got ", z.sizes());
  TORCH_CHECK(!gs.empty() && gs.size() <= 16, "spectral_correlation takes 1 to 16 spectra");
  for (const auto& g : gs)
    TORCH_CHECK(g.device().is_cpu() && g.sizes() == z.sizes() && g.scalar_type() == z.scalar_type() &&
                g.stride(2) == 1 && g.stride(1) == g.size(2), "each g must be shaped and typed as z (",
                z.sizes(), ") with contiguous (c, F) planes, got ", g.sizes());
  const int64_t R = z.size(0), C = z.size(1), F = z.size(2), tiles = (F + kTileF - 1) / kTileF;
  std::vector<at::Tensor> outs;
  for (size_t t = 0; t < gs.size(); ++t) outs.push_back(at::empty({C, F}, z.options()));
  auto run = [&](auto zero) {  // scalar_t: the real type of z's complex values
    using scalar_t = decltype(zero);
    const scalar_t* zp = reinterpret_cast<const scalar_t*>(z.data_ptr());
    std::vector<const scalar_t*> gp;
    std::vector<int64_t> gr;
    std::vector<scalar_t*> op;
    for (size_t t = 0; t < gs.size(); ++t) {
      gp.push_back(reinterpret_cast<const scalar_t*>(gs[t].data_ptr()));
      gr.push_back(2 * gs[t].stride(0));
      op.push_back(reinterpret_cast<scalar_t*>(outs[t].data_ptr()));
    }
    at::parallel_for(0, C * tiles, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {  // task = (channel, tile of frequencies)
        const int64_t c = task / tiles, f0 = (task % tiles) * kTileF, len = std::min(kTileF, F - f0);
        const int64_t at = 2 * (c * F + f0);  // the tile's first scalar in a (c, F) plane
        for (size_t t0 = 0; t0 < gs.size(); t0 += kGroup) {
          const int count = int(std::min<size_t>(kGroup, gs.size() - t0));
          const scalar_t* tile_gs[kGroup];
          scalar_t* tile_outs[kGroup];
          for (int t = 0; t < count; ++t) {
            tile_gs[t] = gp[t0 + t] + at;
            tile_outs[t] = op[t0 + t] + at;
          }
          correlate_tile<scalar_t>(zp + at, 2 * z.stride(0), tile_gs, gr.data() + t0, tile_outs, count, R, len);
        }
      }
    });
  };
  if (z.scalar_type() == at::kComplexFloat) {
    run(float(0));
  } else {
    run(double(0));
  }
  return outs;
}

}  // namespace spe_detail
