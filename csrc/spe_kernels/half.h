// float16 storage of a code: the conversions between float and IEEE half (at::Half) that the kernels
// use to read a half code block into float and to write a float code as half. Rounding to nearest
// even, as torch's own .to(torch.float16), so that a code written here equals the float code
// converted by torch (tested). Vector instructions where the CPU has them (AVX-512F: 16 values per
// instruction, F16C: 8), else c10::Half's conversions one value at a time; a build with
// CFLAGS=-DSPE_NO_VECTOR_PATHS keeps the plain loops.
#pragma once

#include <c10/util/Half.h>

#include <cstdint>

#if !defined(SPE_NO_VECTOR_PATHS) && (defined(__AVX512F__) || defined(__F16C__))
#include <immintrin.h>
#endif

namespace spe_detail {

// dst[i] = float(src[i]) for i < n.
inline void half_to_float(float* __restrict__ dst, const at::Half* __restrict__ src, int64_t n) {
  int64_t i = 0;
#if !defined(SPE_NO_VECTOR_PATHS) && defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif !defined(SPE_NO_VECTOR_PATHS) && defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// dst[i] = half(src[i]) for i < n. With `stream`, 16-value groups whose destination is 32-byte
// aligned are stored past the caches (non-temporal, as `stream16` in rows.h: for a code written once
// and read in a later pass; the loop that streams ends with stream_fence()).
inline void float_to_half(at::Half* __restrict__ dst, const float* __restrict__ src, int64_t n, bool stream) {
  int64_t i = 0;
#if !defined(SPE_NO_VECTOR_PATHS) && defined(__AVX512F__)
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kRound);
    __m256i* p = reinterpret_cast<__m256i*>(dst + i);
    if (stream && (reinterpret_cast<std::uintptr_t>(p) & 31) == 0) {
      _mm256_stream_si256(p, h);
    } else {
      _mm256_storeu_si256(p, h);
    }
  }
#elif !defined(SPE_NO_VECTOR_PATHS) && defined(__F16C__)
  (void)stream;
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRound));
#else
  (void)stream;
#endif
  for (; i < n; ++i) dst[i] = at::Half(src[i]);
}

}  // namespace spe_detail
