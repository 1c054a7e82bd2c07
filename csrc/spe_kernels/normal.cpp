// Counter-based Gaussian noise (spe/random.py holds the PyTorch reference and the contract, with
// the order of the samples): each sample of a draw with 64-bit key `seed` is one of the four 32-bit
// words of Philox4x32-10 (Salmon et al., SC 2011) of one counter, after Box-Muller on pairs of
// words. Every sample is a function of (seed, index) alone, so the samples are drawn in parallel, in
// any order, and a slice of a draw can be drawn again without the rest. The Philox rounds use
// AVX-512 intrinsics where the build has them; the logarithm, sine and cosine are short polynomials
// (float error about 1e-7) that the compiler vectorises, unlike the C library's.
#include "common.h"
#include "trig.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace spe_detail {

namespace {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // Philox4x32 multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
constexpr int64_t kBlock = 64;                             // counters per inner loop (256 samples)

// The 10 Philox rounds of kBlock counters (c0, c1, c2, c3) in place.
inline void rounds(uint32_t* c0, uint32_t* c1, uint32_t* c2, uint32_t* c3, uint32_t k0, uint32_t k1) {
#if defined(__AVX512F__)
  // 4 vectors of 16 counters, interleaved so that their dependency chains overlap; the 32 x 32 -> 64-bit
  // products of even and odd lanes are taken separately, then the halves blended back
  static_assert(kBlock == 64, "four vectors of 16 counters");
  const __m512i m0 = _mm512_set1_epi64(kM0), m1 = _mm512_set1_epi64(kM1);
  __m512i x0[4], x1[4], x2[4], x3[4];
  for (int v = 0; v < 4; ++v) {
    x0[v] = _mm512_loadu_si512(c0 + 16 * v);
    x1[v] = _mm512_loadu_si512(c1 + 16 * v);
    x2[v] = _mm512_loadu_si512(c2 + 16 * v);
    x3[v] = _mm512_loadu_si512(c3 + 16 * v);
  }
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi32(int(k0)), key1 = _mm512_set1_epi32(int(k1));
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512i p0e = _mm512_mul_epu32(x0[v], m0), p0o = _mm512_mul_epu32(_mm512_srli_epi64(x0[v], 32), m0);
      const __m512i p1e = _mm512_mul_epu32(x2[v], m1), p1o = _mm512_mul_epu32(_mm512_srli_epi64(x2[v], 32), m1);
      const __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, p0e, _mm512_slli_epi64(p0o, 32));
      const __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, p1e, _mm512_slli_epi64(p1o, 32));
      const __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(p0e, 32), p0o);
      const __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(p1e, 32), p1o);
      x0[v] = _mm512_ternarylogic_epi32(hi1, x1[v], key0, 0x96);  // a ^ b ^ c
      x2[v] = _mm512_ternarylogic_epi32(hi0, x3[v], key1, 0x96);
      x1[v] = lo1;
      x3[v] = lo0;
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int v = 0; v < 4; ++v) {
    _mm512_storeu_si512(c0 + 16 * v, x0[v]);
    _mm512_storeu_si512(c1 + 16 * v, x1[v]);
    _mm512_storeu_si512(c2 + 16 * v, x2[v]);
    _mm512_storeu_si512(c3 + 16 * v, x3[v]);
  }
#else
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int64_t j = 0; j < kBlock; ++j) {
      const uint64_t p0 = uint64_t(kM0) * c0[j], p1 = uint64_t(kM1) * c2[j];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[j] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[j] ^ k1;
      c1[j] = uint32_t(p1);
      c3[j] = uint32_t(p0);
      c0[j] = n0;
      c2[j] = n2;
    }
    k0 += kW0;
    k1 += kW1;
  }
#endif
}

// log(u) for u in (0, 1]: u = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1).
inline float log_unit(float u) {
  uint32_t bits;
  std::memcpy(&bits, &u, sizeof(bits));
  const uint32_t high = (bits & 0x007FFFFFu) > 0x003504F3u;  // mantissa above sqrt(2): halve m
  const int32_t e = int32_t(bits >> 23) - 127 + int32_t(high);
  bits = (bits & 0x007FFFFFu) | (high ? 0x3F000000u : 0x3F800000u);
  float m;
  std::memcpy(&m, &bits, sizeof(m));
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  const float series = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
  return float(e) * 0.69314718f + 2.0f * s * series;
}

// Samples first .. first + count - 1 of the draw into out (float or double), a block of kBlock
// counters (4 kBlock samples) at a time, each step a loop over the block that the compiler
// vectorises. Sample i of the draw is word w = (i mod 4 kBlock) / kBlock of counter
// (i / (4 kBlock)) kBlock + i mod kBlock: a block's samples are its words 0, 1, 2, 3 in turn.
template <typename scalar_t>
void fill(scalar_t* out, int64_t first, int64_t count, uint32_t k0, uint32_t k1) {
  uint32_t c0[kBlock], c1[kBlock], c2[kBlock], c3[kBlock];
  float samples[4 * kBlock];
  const int64_t end = first + count;
  for (int64_t block = first / (4 * kBlock); block * 4 * kBlock < end; ++block) {
#pragma omp simd
    for (int64_t j = 0; j < kBlock; ++j) {
      const uint64_t counter = uint64_t(block * kBlock + j);
      c0[j] = uint32_t(counter);
      c1[j] = uint32_t(counter >> 32);
      c2[j] = 0u;
      c3[j] = 0u;
    }
    rounds(c0, c1, c2, c3, k0, k1);
#pragma omp simd
    for (int64_t j = 0; j < kBlock; ++j) {  // Box-Muller on (c0, c1) and (c2, c3)
      const float u0 = float((c0[j] >> 8) + 1) * 5.9604645e-8f, v0 = float(c1[j] >> 8) * 5.9604645e-8f;
      const float u1 = float((c2[j] >> 8) + 1) * 5.9604645e-8f, v1 = float(c3[j] >> 8) * 5.9604645e-8f;
      const float r0 = __builtin_sqrtf(-2.0f * log_unit(u0)), r1 = __builtin_sqrtf(-2.0f * log_unit(u1));
      float cs0, sn0, cs1, sn1;
      turn(v0, cs0, sn0);
      turn(v1, cs1, sn1);
      samples[j] = r0 * cs0;
      samples[kBlock + j] = r0 * sn0;
      samples[2 * kBlock + j] = r1 * cs1;
      samples[3 * kBlock + j] = r1 * sn1;
    }
    const int64_t start = block * 4 * kBlock, from = std::max(first, start), to = std::min(end, start + 4 * kBlock);
    std::copy(samples + (from - start), samples + (to - start), out + (from - first));
  }
}

}  // namespace

// Fills the contiguous float32 / float64 tensor out with samples of the draw keyed by seed (its 64
// bits are Philox's key): row r of out (its first dimension, of L values) with samples
// offset + r row_stride .. offset + r row_stride + L - 1; row_stride -1 means L (then out holds samples
// offset .. offset + numel - 1). One parallel loop over all rows: a chunk of channels of a noise
// spectrum (spe/spectra.py) is one call, not one per realisation.
void normal_fill(at::Tensor& out, int64_t seed, int64_t offset, int64_t row_stride) {
  TORCH_CHECK(out.device().is_cpu() && out.is_contiguous(), "out must be a contiguous CPU tensor");
  TORCH_CHECK(offset >= 0, "offset must be >= 0, got ", offset);
  const uint32_t k0 = uint32_t(uint64_t(seed)), k1 = uint32_t(uint64_t(seed) >> 32);
  const int64_t n = out.numel(), grain = 4 * kBlock * 64;
  const int64_t rows = out.dim() == 0 || out.size(0) == 0 ? 1 : out.size(0), row = n / rows;
  if (row_stride < 0) row_stride = row;
  TORCH_CHECK(rows == 1 || row_stride >= row, "row_stride must be at least a row's ", row, " values, got ", row_stride);
  dispatch(out, [&](auto zero) {
    using scalar_t = decltype(zero);
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end;) {  // the part of each row within [begin, end)
        const int64_t r = i / row, stop = std::min(end, (r + 1) * row);
        fill<scalar_t>(op + i, offset + r * row_stride + (i - r * row), stop - i, k0, k1);
        i = stop;
      }
    });
  });
}

// The four Philox4x32-10 words of one counter and key, by the kernel's own rounds (the known-answer test).
std::vector<int64_t> philox4x32(const std::vector<int64_t>& counter, const std::vector<int64_t>& key) {
  TORCH_CHECK(counter.size() == 4 && key.size() == 2, "philox4x32 takes 4 counter and 2 key words");
  uint32_t c[4][kBlock] = {};  // lane 0 holds the counter
  for (int j = 0; j < 4; ++j) c[j][0] = uint32_t(counter[j]);
  rounds(c[0], c[1], c[2], c[3], uint32_t(key[0]), uint32_t(key[1]));
  return {c[0][0], c[1][0], c[2][0], c[3][0]};
}

}  // namespace spe_detail
