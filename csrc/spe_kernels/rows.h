// Row operations of the spe_kernels loops, over rows of R values (the realisations), with R fixed at
// compile time for the common sizes: with a constant trip count the compiler unrolls and vectorises
// the loops fully instead of emitting a generic loop with remainders for each short row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common.h"
#include "half.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace spe_detail {

// Orders the non-temporal stores of `stream16` (weakly ordered) before whatever follows: the end of
// every parallel task that streams.
inline void stream_fence() {
#if defined(__AVX512F__)
  _mm_sfence();
#endif
}

// The row length: KR when the kernel was compiled for it, else R (read at run time).
template <int64_t KR>
constexpr int64_t fixed(int64_t R) {
  return KR > 0 ? KR : R;
}

// Calls f(scalar_t{}, std::integral_constant<int64_t, KR>{}) for the float32 / float64 tensor t and
// rows of R values: KR = R for R in {64, 32}, KR = 0 (run-time length) otherwise.
template <typename F>
inline void dispatch_rows(const at::Tensor& t, int64_t R, F f) {
  dispatch(t, [&](auto zero) {
    if (R == 64) {
      f(zero, std::integral_constant<int64_t, 64>{});
    } else if (R == 32) {
      f(zero, std::integral_constant<int64_t, 32>{});
    } else {
      f(zero, std::integral_constant<int64_t, 0>{});
    }
  });
}

// acc[k, r] += v[k * vstride] e[r] for k < n: the outer product of a column and a row, into (n, R).
template <typename scalar_t, int64_t KR>
inline void add_scaled_row(scalar_t* __restrict__ acc, const scalar_t* v, int64_t vstride,
                           const scalar_t* __restrict__ e, int64_t n, int64_t R) {
  for (int64_t k = 0; k < n; ++k) {
    const scalar_t vk = v[k * vstride];
    scalar_t* __restrict__ row = acc + k * fixed<KR>(R);
#pragma omp simd
    for (int64_t r = 0; r < fixed<KR>(R); ++r) row[r] += vk * e[r];
  }
}

// p[r] += sum_k v[k * vstride] rows[k, r] for k < n: a combination of the rows of (n, R), four rows
// per pass over p.
template <typename scalar_t, int64_t KR>
inline void add_combination(scalar_t* __restrict__ p, const scalar_t* v, int64_t vstride,
                            const scalar_t* __restrict__ rows, int64_t n, int64_t R) {
  const int64_t len = fixed<KR>(R);
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const scalar_t v0 = v[k * vstride], v1 = v[(k + 1) * vstride];
    const scalar_t v2 = v[(k + 2) * vstride], v3 = v[(k + 3) * vstride];
    const scalar_t* __restrict__ r0 = rows + k * len;
#pragma omp simd
    for (int64_t r = 0; r < fixed<KR>(R); ++r)
      p[r] += v0 * r0[r] + v1 * r0[len + r] + v2 * r0[2 * len + r] + v3 * r0[3 * len + r];
  }
  for (; k < n; ++k) {
    const scalar_t vk = v[k * vstride];
    const scalar_t* __restrict__ row = rows + k * len;
#pragma omp simd
    for (int64_t r = 0; r < fixed<KR>(R); ++r) p[r] += vk * row[r];
  }
}

// out[r] = sum_k v[k] rows[k, r] for k < n: a combination written (not added) into a row that a later
// pass reads (for float rows of 64, through `stream16`).
template <typename scalar_t, int64_t KR>
inline void write_combination(scalar_t* __restrict__ out, const scalar_t* v, const scalar_t* __restrict__ rows,
                              int64_t n, int64_t R) {
  std::fill(out, out + fixed<KR>(R), scalar_t(0));
  add_combination<scalar_t, KR>(out, v, 1, rows, n, R);
}

// write_combination with the row stored as float16 (a float32 code kept in half precision), formed
// in `row` (R floats) first; for rows of 64 in registers, with write_combination's arithmetic (the
// stored values are those of the float code, rounded).
template <int64_t KR>
inline void write_combination_half(at::Half* out, const float* v, const float* __restrict__ rows, int64_t n,
                                   int64_t R, float* __restrict__ row) {
  write_combination<float, KR>(row, v, rows, n, R);
  float_to_half(out, row, fixed<KR>(R), true);
}

// out[d * ostride + r] = sum_k xv[k, d] rows[k, r] for d < D: the D rows of x^T g for one block, xv (n, D)
// and rows (n, R), each output row a combination of the n rows.
template <typename scalar_t, int64_t KR>
inline void block_rows_plain(scalar_t* out, int64_t ostride, const scalar_t* xv, const scalar_t* __restrict__ rows,
                             int64_t n, int64_t D, int64_t R) {
  for (int64_t d = 0; d < D; ++d) {
    std::fill(out + d * ostride, out + d * ostride + fixed<KR>(R), scalar_t(0));
    add_combination<scalar_t, KR>(out + d * ostride, xv + d, D, rows, n, R);
  }
}

// block_rows_plain, or a faster path where one applies (rows of 64 floats).
template <typename scalar_t, int64_t KR>
inline void block_rows(scalar_t* out, int64_t ostride, const scalar_t* xv, const scalar_t* __restrict__ rows,
                       int64_t n, int64_t D, int64_t R) {
  block_rows_plain<scalar_t, KR>(out, ostride, xv, rows, n, D, R);
}

// out[k * ostride] = sum_r e[r] rows[k, r] for k < n: the products of one row with the rows of (n, R),
// four at a time.
template <typename scalar_t, int64_t KR>
inline void dot_rows(scalar_t* out, int64_t ostride, const scalar_t* __restrict__ e,
                     const scalar_t* __restrict__ rows, int64_t n, int64_t R) {
  const int64_t len = fixed<KR>(R);
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const scalar_t* __restrict__ r0 = rows + k * len;
    scalar_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int64_t r = 0; r < fixed<KR>(R); ++r) {
      s0 += e[r] * r0[r];
      s1 += e[r] * r0[len + r];
      s2 += e[r] * r0[2 * len + r];
      s3 += e[r] * r0[3 * len + r];
    }
    out[k * ostride] = s0;
    out[(k + 1) * ostride] = s1;
    out[(k + 2) * ostride] = s2;
    out[(k + 3) * ostride] = s3;
  }
  for (; k < n; ++k) {
    const scalar_t* __restrict__ row = rows + k * len;
    scalar_t s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t r = 0; r < fixed<KR>(R); ++r) s += e[r] * row[r];
    out[k * ostride] = s;
  }
}

// out[k, d] = sum_r g[k, r] e[d, r] for k < n, d < D: the products of the n rows of g (n, R) with the
// D rows of a block e (D, R), into out (n, D). The reference loop: one dot product per (k, d).
template <typename scalar_t, int64_t KR>
inline void block_products(scalar_t* out, const scalar_t* __restrict__ e, const scalar_t* __restrict__ g,
                           int64_t n, int64_t D, int64_t R) {
  for (int64_t d = 0; d < D; ++d) dot_rows<scalar_t, KR>(out + d, D, e + d * fixed<KR>(R), g, n, R);
}

// out[i] = sum_r rows[i, r] e[r] for i < n: one row against the n rows of (n, R).
template <typename scalar_t, int64_t KR>
inline void row_dots(scalar_t* out, const scalar_t* __restrict__ e, const scalar_t* __restrict__ rows,
                     int64_t n, int64_t R) {
  dot_rows<scalar_t, KR>(out, 1, e, rows, n, R);
}

// row[r] = a code_row[r] + c noise_row[r]: one row of the effective (gated) code.
template <typename scalar_t, int64_t KR>
inline void effective_row(scalar_t* __restrict__ row, const scalar_t* __restrict__ code_row, scalar_t a,
                          scalar_t c, const scalar_t* __restrict__ noise_row, int64_t R) {
#pragma omp simd
  for (int64_t r = 0; r < fixed<KR>(R); ++r) row[r] = a * code_row[r] + c * noise_row[r];
}

// acc[k, r] = sum_d xv[k, d] e[d, r] for k < n: the contraction of one (s, h) block, with the
// effective rows e[d] = a[d] code[d] + c[d] noise[d] formed one at a time in `row` (R values) when a
// is given (a, c: the head's (D) gate values, noise its (D, R) rows), else e = code. acc is (n, R).
template <typename scalar_t, int64_t KR>
inline void block_combinations(scalar_t* __restrict__ acc, const scalar_t* xv, const scalar_t* code,
                               const scalar_t* a, const scalar_t* c, const scalar_t* noise, int64_t n,
                               int64_t D, int64_t R, scalar_t* __restrict__ row) {
  const int64_t len = fixed<KR>(R);
  std::fill(acc, acc + n * len, scalar_t(0));
  for (int64_t d = 0; d < D; ++d) {
    const scalar_t* e = code + d * len;
    if (a != nullptr) {
      effective_row<scalar_t, KR>(row, e, a[d], c[d], noise + d * len, R);
      e = row;
    }
    add_scaled_row<scalar_t, KR>(acc, xv + d, D, e, n, R);
  }
}

// The backward's per-row work on the product P = x^T g of one (s, h) block (xv (n, D), g (n, R)):
// for each d, psum[d] += P[d] and dots[d] += sum_r code[d, r] P[d, r] (the gate's sums; both
// skipped when psum is null), buf[d] += a[d] P[d] (skipped when buf is null; a null: 1).
template <typename scalar_t, int64_t KR>
inline void gate_rows(const scalar_t* xv, const scalar_t* g, int64_t n, const scalar_t* code, scalar_t* psum,
                      scalar_t* dots, scalar_t* buf, const scalar_t* a, int64_t D, int64_t R,
                      scalar_t* __restrict__ prow) {
  const int64_t len = fixed<KR>(R);
  for (int64_t d = 0; d < D; ++d) {
    std::fill(prow, prow + len, scalar_t(0));
    add_combination<scalar_t, KR>(prow, xv + d, D, g, n, R);
    const scalar_t* __restrict__ p = prow;
    const scalar_t* __restrict__ crow = code + d * len;
    if (psum != nullptr) {
      scalar_t* __restrict__ ps = psum + d * len;
      scalar_t dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t r = 0; r < fixed<KR>(R); ++r) {
        dot += crow[r] * p[r];
        ps[r] += p[r];
      }
      dots[d] += dot;
    }
    if (buf != nullptr) {
      const scalar_t ad = a != nullptr ? a[d] : scalar_t(1);
      scalar_t* __restrict__ brow = buf + d * len;
#pragma omp simd
      for (int64_t r = 0; r < fixed<KR>(R); ++r) brow[r] += ad * p[r];
    }
  }
}

// ---- float rows of 64 in 16-lane vectors (GCC vector extensions; other compilers, or a build with
// CFLAGS=-DSPE_NO_VECTOR_PATHS, keep the loops above: same values; the test suite passed with both builds) ----
#if defined(__GNUC__) && !defined(__clang__) && !defined(SPE_NO_VECTOR_PATHS)

// The same for float rows of 64 with D a multiple of 16, in 16-lane vectors (GCC vector extensions:
// AVX-512 registers where there are some, pairs of AVX2 ones elsewhere): the 16 dot products of a
// row of g with 16 rows of e are kept as 16 vectors of partial sums, then added across lanes all at
// once by a butterfly of shuffles (4 levels, 15 additions) instead of 16 separate horizontal sums.
using Lanes16 = float __attribute__((vector_size(64)));
using Index16 = int __attribute__((vector_size(64)));

inline Lanes16 load16(const float* p) {
  Lanes16 v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

// 16 float16 values as floats.
inline Lanes16 load16(const at::Half* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<Lanes16>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#else
  float values[16];
  half_to_float(values, p, 16);
  return load16(values);
#endif
}

// *p = v (16 floats), stored past the caches (a non-temporal store) where the CPU has AVX-512 and p is
// 64-byte aligned, else plainly. For outputs of 100+ MiB written once and read in a later pass (a
// code): a plain store first reads each line in and later writes it back when it is evicted, dirty.
// A loop that streams ends with stream_fence() (non-temporal stores are weakly ordered).
inline void stream16(float* p, Lanes16 v) {
#if defined(__AVX512F__)
  if ((reinterpret_cast<std::uintptr_t>(p) & 63) == 0) {
    _mm512_stream_ps(p, reinterpret_cast<__m512>(v));
    return;
  }
#endif
  __builtin_memcpy(p, &v, sizeof(v));
}

// Halves of each group of `size` lanes of x and y, interleaved by group, added: (x, y) -> one vector
// holding twice as many groups of half the size.
template <int size>
inline Lanes16 fold(Lanes16 x, Lanes16 y) {
  Index16 lo, hi;
  for (int i = 0; i < 16; ++i) {
    const int group = i / size, lane = i % size, half = size / 2;  // lane < half: from x, else from y
    const int source = lane < half ? group * size + lane : 16 + group * size + (lane - half);
    lo[i] = source;
    hi[i] = source + half;
  }
  return __builtin_shuffle(x, y, lo) + __builtin_shuffle(x, y, hi);
}

// out[i] = the sum of the lanes of v[i], for i < count <= 16: four levels of `fold`, 15 additions in
// all, instead of 16 separate horizontal sums.
inline void butterfly16(float* out, const Lanes16 (&v)[16], int count) {
  // the butterfly leaves the sum of input i in lane bitreverse4(i)
  static constexpr int kLane[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
  Lanes16 w[8], x[4], y[2];
  for (int i = 0; i < 8; ++i) w[i] = fold<16>(v[2 * i], v[2 * i + 1]);
  for (int i = 0; i < 4; ++i) x[i] = fold<8>(w[2 * i], w[2 * i + 1]);
  for (int i = 0; i < 2; ++i) y[i] = fold<4>(x[2 * i], x[2 * i + 1]);
  const Lanes16 sums = fold<2>(y[0], y[1]);
  for (int i = 0; i < count; ++i) out[i] = sums[kLane[i]];
}

// out[i] = sum_r rows[i, r] g[r] for i < count <= 16: float rows of 64, g as four vectors; the 16 (or
// fewer, the rest zero) vectors of partial sums added across lanes by one butterfly.
inline void dots16(float* out, const float* rows, int count, const Lanes16 (&g)[4]) {
  Lanes16 v[16];
  for (int i = 0; i < 16; ++i) {
    const float* row = rows + i * 64;
    v[i] = i < count ? load16(row) * g[0] + load16(row + 16) * g[1] + load16(row + 32) * g[2] +
                           load16(row + 48) * g[3]
                     : Lanes16{};
  }
  butterfly16(out, v, count);
}

inline void load64(Lanes16 (&g)[4], const float* p) {
  for (int q = 0; q < 4; ++q) g[q] = load16(p + 16 * q);
}

// 16 values of a row that a later pass reads, stored past the caches: as float, or as float16.
inline void store_row16(float* p, Lanes16 v) { stream16(p, v); }
inline void store_row16(at::Half* p, Lanes16 v) {
  float values[16];
  __builtin_memcpy(values, &v, sizeof(v));
  float_to_half(p, values, 16, true);
}

// out = sum_k v[k] rows[k] for rows of 64, formed in four vectors and stored as float or float16.
template <typename out_t>
inline void write_combination64(out_t* out, const float* v, const float* __restrict__ rows, int64_t n) {
  Lanes16 acc[4] = {};
  for (int64_t k = 0; k < n; ++k)
    for (int q = 0; q < 4; ++q) acc[q] += v[k] * load16(rows + k * 64 + 16 * q);
  for (int q = 0; q < 4; ++q) store_row16(out + 16 * q, acc[q]);
}

template <>
inline void write_combination<float, 64>(float* __restrict__ out, const float* v, const float* __restrict__ rows,
                                         int64_t n, int64_t R) {
  write_combination64(out, v, rows, n);
}

template <>
inline void write_combination_half<64>(at::Half* out, const float* v, const float* __restrict__ rows, int64_t n,
                                       int64_t R, float* __restrict__ row) {
  write_combination64(out, v, rows, n);
}

// The same for float rows of 64 with D a multiple of 4: four output rows at a time in 16 vector
// registers, each row of g loaded once for the four.
template <>
inline void block_rows<float, 64>(float* out, int64_t ostride, const float* xv, const float* __restrict__ rows,
                                  int64_t n, int64_t D, int64_t R) {
  if (D % 4 != 0) {
    block_rows_plain<float, 64>(out, ostride, xv, rows, n, D, R);
    return;
  }
  for (int64_t d0 = 0; d0 < D; d0 += 4) {
    Lanes16 acc[4][4] = {};
    for (int64_t k = 0; k < n; ++k) {
      Lanes16 g[4];
      load64(g, rows + k * 64);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const float x = xv[k * D + d0 + i];
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) acc[i][q] += x * g[q];
      }
    }
    for (int i = 0; i < 4; ++i)
      for (int q = 0; q < 4; ++q) __builtin_memcpy(out + (d0 + i) * ostride + 16 * q, &acc[i][q], sizeof(Lanes16));
  }
}

template <>
inline void block_products<float, 64>(float* out, const float* __restrict__ e, const float* __restrict__ g,
                                      int64_t n, int64_t D, int64_t R) {
  if (D % 16 != 0) {
    for (int64_t d = 0; d < D; ++d) dot_rows<float, 64>(out + d, D, e + d * 64, g, n, R);
    return;
  }
  for (int64_t k = 0; k < n; ++k) {
    Lanes16 row[4];
    load64(row, g + k * 64);
    for (int64_t d0 = 0; d0 < D; d0 += 16) dots16(out + k * D + d0, e + d0 * 64, 16, row);
  }
}

template <>
inline void row_dots<float, 64>(float* out, const float* __restrict__ e, const float* __restrict__ rows,
                                int64_t n, int64_t R) {
  Lanes16 row[4];
  load64(row, e);
  for (int64_t i0 = 0; i0 < n; i0 += 16)
    dots16(out + i0, rows + i0 * 64, static_cast<int>(std::min<int64_t>(16, n - i0)), row);
}

// Rows k0 .. k0+K-1 of block_combinations<float, 64>, held in 4K vector registers through the loop
// over d, each effective row formed in registers.
template <int K, typename code_t>
inline void combination_tile(float* __restrict__ acc, const float* xv, const code_t* code, const float* a,
                             const float* c, const float* noise, int64_t k0, int64_t D) {
  Lanes16 sum[K][4] = {};
  for (int64_t d = 0; d < D; ++d) {
    Lanes16 e[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      e[q] = load16(code + d * 64 + 16 * q);
      if (a != nullptr) e[q] = a[d] * e[q] + c[d] * load16(noise + d * 64 + 16 * q);
    }
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) {
      const float v = xv[(k0 + k) * D + d];
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) sum[k][q] += v * e[q];
    }
  }
  for (int k = 0; k < K; ++k)
    for (int q = 0; q < 4; ++q) __builtin_memcpy(acc + (k0 + k) * 64 + 16 * q, &sum[k][q], sizeof(Lanes16));
}

// block_combinations for float rows of 64 and a code of float or float16 (each row converted in
// registers): tiles of 4 rows of acc (then 2, then 1 for the rest).
template <typename code_t>
inline void combination_tiles(float* __restrict__ acc, const float* xv, const code_t* code, const float* a,
                              const float* c, const float* noise, int64_t n, int64_t D) {
  int64_t k0 = 0;
  for (; k0 + 4 <= n; k0 += 4) combination_tile<4>(acc, xv, code, a, c, noise, k0, D);
  if (k0 + 2 <= n) {
    combination_tile<2>(acc, xv, code, a, c, noise, k0, D);
    k0 += 2;
  }
  if (k0 < n) combination_tile<1>(acc, xv, code, a, c, noise, k0, D);
}

template <>
inline void block_combinations<float, 64>(float* __restrict__ acc, const float* xv, const float* code,
                                          const float* a, const float* c, const float* noise, int64_t n,
                                          int64_t D, int64_t R, float* __restrict__ row) {
  combination_tiles(acc, xv, code, a, c, noise, n, D);
}

// The same for float rows of 64: each P row in registers, the code . P products of 16 rows summed
// across lanes by one butterfly.
template <>
inline void gate_rows<float, 64>(const float* xv, const float* g, int64_t n, const float* code, float* psum,
                                 float* dots, float* buf, const float* a, int64_t D, int64_t R,
                                 float* __restrict__ prow) {
  for (int64_t d0 = 0; d0 < D; d0 += 16) {
    const int count = static_cast<int>(std::min<int64_t>(16, D - d0));
    Lanes16 v[16];
    for (int i = 0; i < 16; ++i) {
      v[i] = Lanes16{};
      if (i >= count) continue;
      const int64_t d = d0 + i;
      Lanes16 p[4] = {};
      for (int64_t k = 0; k < n; ++k) {
        const float x = xv[k * D + d];
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) p[q] += x * load16(g + k * 64 + 16 * q);
      }
      if (psum != nullptr) {
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
          float* ps = psum + d * 64 + 16 * q;
          const Lanes16 sum = load16(ps) + p[q];
          __builtin_memcpy(ps, &sum, sizeof(sum));
          v[i] += load16(code + d * 64 + 16 * q) * p[q];
        }
      }
      if (buf != nullptr) {
        const float ad = a != nullptr ? a[d] : 1.0f;
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
          float* b = buf + d * 64 + 16 * q;
          const Lanes16 sum = load16(b) + ad * p[q];
          __builtin_memcpy(b, &sum, sizeof(sum));
        }
      }
    }
    if (psum != nullptr) {
      float sums[16];
      butterfly16(sums, v, count);
      for (int i = 0; i < count; ++i) dots[d0 + i] += sums[i];
    }
  }
}

#endif  // GCC vector extensions

// xv[b, d] *= scale[d] for b < rows: x rows (rows, D) scaled by one head's (D) scale.
template <typename scalar_t>
inline void scale_rows(scalar_t* __restrict__ xv, const scalar_t* __restrict__ scale, int64_t rows, int64_t D) {
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t d = 0; d < D; ++d) xv[b * D + d] *= scale[d];
}

// Copies the (s, h) rows of t (B, S, H, n), any strides, into rows (B, n).
template <typename scalar_t>
inline void gather(const at::Tensor& t, int64_t s, int64_t h, scalar_t* __restrict__ rows) {
  const scalar_t* src = t.data_ptr<scalar_t>() + s * t.stride(1) + h * t.stride(2);
  const int64_t B = t.size(0), n = t.size(3), sb = t.stride(0), sn = t.stride(3);
  if (sn == 1) {
    for (int64_t b = 0; b < B; ++b) std::copy(src + b * sb, src + b * sb + n, rows + b * n);
    return;
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < n; ++k) rows[b * n + k] = src[b * sb + k * sn];
}

// Asks for the `bytes` bytes at p to be brought into cache (the forward's next (s, h) code block:
// the hardware prefetcher alone left the forward about 20% slower, bench/README.md).
inline void prefetch_block(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off);
}

// Checks the (x_t (B_t, S, H, D), g_t (B_t, S, H, R), scale_t (H, D) or None) triples of an
// accumulation against a reference tensor whose first three dimensions are (S, H, D) (the code, or
// a sineSPE omega); returns the scales, contiguous (undefined where None).
inline std::vector<at::Tensor> check_pairs(const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& gs,
                                           const std::vector<c10::optional<at::Tensor>>& scales,
                                           const at::Tensor& ref, int64_t R) {
  TORCH_CHECK(xs.size() == gs.size(), "an accumulation needs as many x as grad tensors");
  TORCH_CHECK(scales.empty() || scales.size() == xs.size(), "an accumulation needs one scale (or None) per x");
  std::vector<at::Tensor> scale(xs.size());
  for (size_t t = 0; t < xs.size(); ++t) {
    check_rows(xs[t], ref, ref.size(2), "x");
    check_rows(gs[t], ref, R, "grad");
    TORCH_CHECK(xs[t].size(0) == gs[t].size(0), "x and grad must have the same batch size");
    if (!scales.empty() && scales[t].has_value() && scales[t]->defined()) {
      scale[t] = scales[t]->contiguous();
      check_gate_hd(scale[t], ref, "scale");
    }
  }
  return scale;
}

// The (s, h) rows of all the triples: grad rows (n, R) and x rows times their scale (n, D), n the
// triples' batch rows together.
template <typename scalar_t>
inline void gather_pairs(const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& gs,
                         const std::vector<at::Tensor>& scale, int64_t s, int64_t h,
                         scalar_t* __restrict__ rows, scalar_t* __restrict__ xv) {
  int64_t k = 0;  // first row of triple t
  for (size_t t = 0; t < xs.size(); ++t) {
    const int64_t D = xs[t].size(3), R = gs[t].size(3);
    gather(gs[t], s, h, rows + k * R);
    gather(xs[t], s, h, xv + k * D);
    if (scale[t].defined()) scale_rows(xv + k * D, scale[t].data_ptr<scalar_t>() + h * D, xs[t].size(0), D);
    k += xs[t].size(0);
  }
}

// The rows of positions s0 .. s0 + count - 1 of every head, for all the triples: gather_pairs of each
// (s0 + t, h) into rows + (t H + h) n R and xv + (t H + h) n D. Each tensor is read in the order of
// its memory (positions inner when they are closer together than heads, as in a gradient that comes
// back heads-first), so that a tile's rows are read as a few long runs.
template <typename scalar_t>
inline void gather_pairs_tile(const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& gs,
                              const std::vector<at::Tensor>& scale, int64_t s0, int64_t count,
                              scalar_t* __restrict__ rows, scalar_t* __restrict__ xv) {
  int64_t n = 0;  // rows of all triples together
  for (const auto& x : xs) n += x.size(0);
  const int64_t H = xs[0].size(2);
  int64_t k = 0;  // first row of triple i
  for (size_t i = 0; i < xs.size(); ++i) {
    for (const auto* pair : {&xs[i], &gs[i]}) {
      const at::Tensor& src = *pair;
      scalar_t* out = pair == &xs[i] ? xv : rows;
      const bool positions_inner = src.stride(1) <= src.stride(2);
      for (int64_t u = 0; u < count * H; ++u) {
        const int64_t t = positions_inner ? u % count : u / H, h = positions_inner ? u / count : u % H;
        gather(src, s0 + t, h, out + ((t * H + h) * n + k) * src.size(3));
      }
    }
    if (scale[i].defined()) {
      const int64_t D = xs[i].size(3);
      for (int64_t u = 0; u < count * H; ++u)  // u = (t, h): the rows of block (s0 + t, h)
        scale_rows(xv + (u * n + k) * D, scale[i].data_ptr<scalar_t>() + (u % H) * D, xs[i].size(0), D);
    }
    k += xs[i].size(0);
  }
}

}  // namespace spe_detail
