// Layout kernels of convSPE's code (spe/conv.py holds the PyTorch references): the FFTs run along
// the last axis, (R, C, S), while the contraction reads (S, C, R). torch's permuted copy of such a
// tensor walks one side with a stride of C*S elements; here each (A, B) plane is copied in square
// tiles that stay in L1. The code gradient of a few heads is formed directly positions-last.
#include "common.h"
#include "half.h"
#include "rows.h"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace spe_detail {

constexpr int64_t kTile = 32;

namespace {

// out[b, a] = x[a, b] for a0 <= a < a1, b0 <= b < b1 (one channel c of swap_outer's tensors), one
// value at a time (converted when out_t is another type: a float code stored as float16).
template <typename in_t, typename out_t>
inline void swap_values(out_t* __restrict__ op, const in_t* xp, int64_t sa, int64_t sb, int64_t ob,
                        int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    const in_t* src = xp + b * sb;
    out_t* __restrict__ dst = op + b * ob;
    for (int64_t a = a0; a < a1; ++a) dst[a] = static_cast<out_t>(src[a * sa]);
  }
}

#if defined(__GNUC__) && !defined(__clang__) && !defined(SPE_NO_VECTOR_PATHS)
// v[i][j] -> v[j][i] for a 16 x 16 float block in 16 vectors: blocks of 8, 4, 2, 1 swapped across the
// diagonal in turn (64 two-vector shuffles).
inline void transpose16(Lanes16 (&v)[16]) {
  for (int step = 8; step >= 1; step /= 2) {
    Index16 low, high;  // row i keeps its lanes without bit `step` and takes row i + step's
    for (int j = 0; j < 16; ++j) {
      low[j] = (j & step) == 0 ? j : 16 + (j - step);
      high[j] = (j & step) == 0 ? j + step : 16 + j;
    }
    for (int i = 0; i < 16; ++i) {
      if ((i & step) != 0) continue;
      const Lanes16 a = v[i], b = v[i + step];
      v[i] = __builtin_shuffle(a, b, low);
      v[i + step] = __builtin_shuffle(a, b, high);
    }
  }
}

#endif

// `swap_values`; for float input with unit stride along b, each 16 x 16 block loaded as 16 rows of x,
// transposed in registers and stored as 16 rows of out (the tile's edges one value at a time). The
// stores go past the caches, a whole 64-byte line at a time: a float16 out takes two blocks along a
// (32 values) per line, both stored before the next row (a line written in two halves far apart
// costs the write-combining buffer a partial flush, several times slower on the small config's codes).
template <typename in_t, typename out_t>
inline void swap_tile(out_t* __restrict__ op, const in_t* xp, int64_t sa, int64_t sb, int64_t ob,
                      int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
#if defined(__GNUC__) && !defined(__clang__) && !defined(SPE_NO_VECTOR_PATHS)
  if constexpr (std::is_same<in_t, float>::value) {
    if (sb == 1) {
      constexpr int kBlocks = 64 / (16 * sizeof(out_t));  // 16 x 16 blocks along a per line of out
      constexpr int64_t kA = 16 * kBlocks;
      const int64_t an = a0 + (a1 - a0) / kA * kA, b16 = b0 + (b1 - b0) / 16 * 16;
      for (int64_t b = b0; b < b16; b += 16)
        for (int64_t a = a0; a < an; a += kA) {
          Lanes16 v[kBlocks][16];
          for (int k = 0; k < kBlocks; ++k) {
            for (int i = 0; i < 16; ++i) v[k][i] = load16(xp + (a + 16 * k + i) * sa + b);
            transpose16(v[k]);
          }
          for (int j = 0; j < 16; ++j)  // read in a later pass
            for (int k = 0; k < kBlocks; ++k) store_row16(op + (b + j) * ob + a + 16 * k, v[k][j]);
        }
      // the edges, one value at a time: columns an .. a1 of the whole rows, then the rows past b16
      swap_values(op, xp, sa, sb, ob, an, a1, b0, b16);
      swap_values(op, xp, sa, sb, ob, a0, a1, b16, b1);
      return;
    }
  }
#endif
  swap_values(op, xp, sa, sb, ob, a0, a1, b0, b1);
}

}  // namespace

// out[b, c, a] = x[a, c, b]: (A, C, B) with any strides -> (B, C, A), a new contiguous tensor or
// `out`, whose last dimension must be contiguous (a crop of a longer buffer: the FFTs' padding).
at::Tensor swap_outer(const at::Tensor& x, c10::optional<at::Tensor> out_arg) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 3, "x must be an (A, C, B) CPU tensor, got ", x.sizes());
  const int64_t A = x.size(0), C = x.size(1), B = x.size(2);
  const int64_t sa = x.stride(0), sc = x.stride(1), sb = x.stride(2);
  at::Tensor out;
  if (out_arg.has_value()) {
    out = *out_arg;
    const bool half = out.scalar_type() == at::kHalf && x.scalar_type() == at::kFloat;
    TORCH_CHECK(out.device().is_cpu() && (out.scalar_type() == x.scalar_type() || half) && out.dim() == 3 &&
                out.size(0) == B && out.size(1) == C && out.size(2) == A && out.stride(2) == 1,
                "out must be a (B, C, A) CPU tensor of x's dtype (or float16 for float32 x) with a contiguous "
                "last dimension, got ", out.scalar_type(), " ", out.sizes());
  } else {
    out = at::empty({B, C, A}, x.options());
  }
  const int64_t ob = out.stride(0), oc = out.stride(1);
  const int64_t a_tiles = (A + kTile - 1) / kTile, b_tiles = (B + kTile - 1) / kTile;
  auto copy = [&](auto* op, const auto* xp) {
    at::parallel_for(0, C * b_tiles, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {  // task = (c, tile of b)
        const int64_t c = task / b_tiles, b0 = (task % b_tiles) * kTile, b1 = std::min(b0 + kTile, B);
        for (int64_t t = 0; t < a_tiles; ++t) {
          const int64_t a0 = t * kTile, a1 = std::min(a0 + kTile, A);
          swap_tile(op + c * oc, xp + c * sc, sa, sb, ob, a0, a1, b0, b1);
        }
      }
      stream_fence();
    });
  };
  if (out.scalar_type() == at::kHalf) {  // a float32 x (checked)
    copy(out.data_ptr<at::Half>(), x.data_ptr<float>());
    return out;
  }
  dispatch(x, [&](auto zero) {
    using scalar_t = decltype(zero);
    copy(out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>());
  });
  return out;
}

}  // namespace spe_detail

namespace spe_detail {

constexpr int64_t kLanes = 16;  // positions per tile of accumulate_positions_last

namespace {

// acc[i][q][j] = sum_k xt[k, d + i, j] gt[k, r + q, j] for i < DB, q < RB, j < kLanes, written to
// out_rows[(i, q)] + j for j < len: one (DB x RB) block of a tile, xt (n, D, kLanes), gt (n, R, kLanes).
template <typename scalar_t, int DB, int RB>
inline void tile_block(const scalar_t* xt, const scalar_t* gt, int64_t n, int64_t D, int64_t R, int64_t d,
                       int64_t r, scalar_t* op, int64_t orr, int64_t oc, int64_t len) {
  scalar_t acc[DB][RB][kLanes] = {};
  for (int64_t k = 0; k < n; ++k) {
    const scalar_t* xk = xt + (k * D + d) * kLanes;
    const scalar_t* gk = gt + (k * R + r) * kLanes;
    for (int i = 0; i < DB; ++i)
      for (int q = 0; q < RB; ++q) {
#pragma omp simd
        for (int64_t j = 0; j < kLanes; ++j) acc[i][q][j] += xk[i * kLanes + j] * gk[q * kLanes + j];
      }
  }
  for (int i = 0; i < DB; ++i)
    for (int q = 0; q < RB; ++q) std::copy(acc[i][q], acc[i][q] + len, op + (r + q) * orr + (d + i) * oc);
}

#if defined(__GNUC__) && !defined(__clang__) && !defined(SPE_NO_VECTOR_PATHS)
// The same for float: the DB x RB sums of 16 lanes held in vector registers (rows.h's Lanes16).
template <int DB, int RB>
inline void tile_block_float(const float* xt, const float* gt, int64_t n, int64_t D, int64_t R, int64_t d,
                             int64_t r, float* op, int64_t orr, int64_t oc, int64_t len) {
  static_assert(kLanes == 16, "one Lanes16 vector per row of a tile");
  Lanes16 acc[DB][RB] = {};
  for (int64_t k = 0; k < n; ++k) {
    const float* xk = xt + (k * D + d) * kLanes;
    const float* gk = gt + (k * R + r) * kLanes;
    Lanes16 xv[DB], gv[RB];
    for (int i = 0; i < DB; ++i) xv[i] = load16(xk + i * kLanes);
    for (int q = 0; q < RB; ++q) gv[q] = load16(gk + q * kLanes);
    for (int i = 0; i < DB; ++i)
      for (int q = 0; q < RB; ++q) acc[i][q] += xv[i] * gv[q];
  }
  for (int i = 0; i < DB; ++i)
    for (int q = 0; q < RB; ++q) {
      float* row = op + (r + q) * orr + (d + i) * oc;
      if (len == kLanes) {
        stream16(row, acc[i][q]);  // the signal is read by the FFT after the whole chunk is formed
        continue;
      }
      float lanes[16];
      __builtin_memcpy(lanes, &acc[i][q], sizeof(lanes));
      std::copy(lanes, lanes + len, row);
    }
}

template <>
inline void tile_block<float, 4, 4>(const float* xt, const float* gt, int64_t n, int64_t D, int64_t R, int64_t d,
                                    int64_t r, float* op, int64_t orr, int64_t oc, int64_t len) {
  tile_block_float<4, 4>(xt, gt, n, D, R, d, r, op, orr, oc, len);
}
#endif

// dst[c, j] = src[j * row_stride + c * col_stride] (times scale[c] when given) for c < cols, j < len:
// `len` rows of `cols` values copied positions-last into a (cols, kLanes) tile, one value at a time.
template <typename scalar_t>
inline void gather_values(scalar_t* __restrict__ dst, const scalar_t* src, int64_t row_stride, int64_t col_stride,
                          int64_t cols, int64_t len, const scalar_t* scale) {
  for (int64_t j = 0; j < len; ++j) {
    const scalar_t* row = src + j * row_stride;
    for (int64_t c = 0; c < cols; ++c)
      dst[c * kLanes + j] = row[c * col_stride] * (scale != nullptr ? scale[c] : scalar_t(1));
  }
}

// `gather_values`, or for float rows a faster path where it applies.
template <typename scalar_t>
inline void gather_tile(scalar_t* __restrict__ dst, const scalar_t* src, int64_t row_stride, int64_t col_stride,
                        int64_t cols, int64_t len, const scalar_t* scale) {
  gather_values(dst, src, row_stride, col_stride, cols, len, scale);
}

#if defined(__GNUC__) && !defined(__clang__) && !defined(SPE_NO_VECTOR_PATHS)
// The same for float rows with unit column stride and cols a multiple of 16: 16 x 16 blocks loaded
// as rows, transposed in registers and stored as the tile's rows (rows past len read as zero).
template <>
inline void gather_tile<float>(float* __restrict__ dst, const float* src, int64_t row_stride, int64_t col_stride,
                               int64_t cols, int64_t len, const float* scale) {
  if (col_stride != 1 || cols % 16 != 0) {
    gather_values(dst, src, row_stride, col_stride, cols, len, scale);
    return;
  }
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    Lanes16 v[16];
    for (int j = 0; j < 16; ++j) v[j] = j < len ? load16(src + j * row_stride + c0) : Lanes16{};
    if (scale != nullptr) {
      const Lanes16 sv = load16(scale + c0);
      for (int j = 0; j < 16; ++j) v[j] *= sv;
    }
    transpose16(v);
    for (int c = 0; c < 16; ++c) __builtin_memcpy(dst + (c0 + c) * kLanes, &v[c], sizeof(Lanes16));
  }
}
#endif

}  // namespace

// out[r, (h - h0) D + d, s] = sum_t sum_b x_t[b, s, h, d] scale_t[h, d] g_t[b, s, h, r]: the code
// gradient of the heads h0 .. h0 + c / D - 1 written (not added) straight into convSPE's FFT layout
// out (R, c, S), a crop of the padded signal (last dimension contiguous). `accumulate` forms the
// same in (S, H, D, R) and needs a zeroed buffer and a transposed copy after it. Tiles of kLanes
// positions: each tile's x and g rows are gathered positions-last, then every (d, r) output row
// is a sum of elementwise products over the triples' batch rows.
void accumulate_positions_last(at::Tensor& out, const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& gs,
                               const std::vector<c10::optional<at::Tensor>>& scales, int64_t h0) {
  TORCH_CHECK(!xs.empty(), "accumulate_positions_last needs at least one (x, grad) pair");
  const at::Tensor ref = xs[0].select(0, 0);  // (S, H, D): the shapes and dtype the pairs are checked against
  TORCH_CHECK(out.device().is_cpu() && out.dim() == 3 && out.stride(2) == 1, "out must be an (R, c, S) CPU "
              "tensor with a contiguous last dimension, got ", out.sizes());
  const int64_t S = ref.size(0), H = ref.size(1), D = ref.size(2), R = out.size(0), C = out.size(1);
  const std::vector<at::Tensor> scale = check_pairs(xs, gs, scales, ref, R);
  TORCH_CHECK(out.scalar_type() == ref.scalar_type() && out.size(2) == S && C % D == 0 && h0 >= 0 &&
              h0 + C / D <= H, "out (", out.sizes(), ") must hold R rows of whole heads from head ", h0,
              " and the pairs' ", S, " positions, in their dtype");
  int64_t n = 0;  // batch rows of all pairs together
  for (const auto& x : xs) n += x.size(0);
  const int64_t heads = C / D, tiles = (S + kLanes - 1) / kLanes;
  const int64_t orr = out.stride(0), oc = out.stride(1);
  dispatch(out, [&](auto zero) {
    using scalar_t = decltype(zero);
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, heads * tiles, 1, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> xt(n * D * kLanes), gt(n * R * kLanes);  // (n, D, kLanes), (n, R, kLanes)
      for (int64_t task = begin; task < end; ++task) {
        const int64_t hh = task / tiles, s0 = (task % tiles) * kLanes, len = std::min(kLanes, S - s0);
        const int64_t h = h0 + hh;
        // a tail tile's lanes past len keep an earlier tile's (finite) values: the lanes are summed
        // independently and only the first len are written out
        int64_t k = 0;
        for (size_t t = 0; t < xs.size(); ++t) {
          const at::Tensor &x = xs[t], &g = gs[t];
          const int64_t xb = x.stride(0), xs1 = x.stride(1), xd = x.stride(3);
          const int64_t gb = g.stride(0), gs1 = g.stride(1), gr = g.stride(3);
          const scalar_t* xp = x.data_ptr<scalar_t>() + h * x.stride(2);
          const scalar_t* gp = g.data_ptr<scalar_t>() + h * g.stride(2);
          const scalar_t* sc = scale[t].defined() ? scale[t].data_ptr<scalar_t>() + h * D : nullptr;
          for (int64_t b = 0; b < x.size(0); ++b, ++k) {
            gather_tile<scalar_t>(xt.data() + k * D * kLanes, xp + b * xb + s0 * xs1, xs1, xd, D, len, sc);
            gather_tile<scalar_t>(gt.data() + k * R * kLanes, gp + b * gb + s0 * gs1, gs1, gr, R, len, nullptr);
          }
        }
        scalar_t* tile_out = op + hh * D * oc + s0;
        int64_t d = 0;
        for (; d + 4 <= D; d += 4) {
          int64_t r = 0;
          for (; r + 4 <= R; r += 4) tile_block<scalar_t, 4, 4>(xt.data(), gt.data(), n, D, R, d, r, tile_out, orr, oc, len);
          for (; r < R; ++r) tile_block<scalar_t, 4, 1>(xt.data(), gt.data(), n, D, R, d, r, tile_out, orr, oc, len);
        }
        for (; d < D; ++d)
          for (int64_t r = 0; r < R; ++r) tile_block<scalar_t, 1, 1>(xt.data(), gt.data(), n, D, R, d, r, tile_out, orr, oc, len);
      }
      stream_fence();
    });
  });
}

}  // namespace spe_detail
