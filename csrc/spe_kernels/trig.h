// Vectorisable sine and cosine of whole turns, shared by the noise (normal.cpp) and sineSPE's features
// (sine.cpp): polynomials the compiler vectorises, unlike the C library's calls.
#pragma once

namespace spe_detail {

// (cos, sin) of 2 pi v for v in [0, 1): a quarter turn q = floor(4 v), the rest as pi/4 + t with
// |t| <= pi/4 (Taylor polynomials to t^9 and t^10), then rotated by q quarter turns.
inline void turn(float v, float& cs, float& sn) {
  const float quarters = 4.0f * v;
  const int q = int(quarters);
  const float t = (quarters - float(q)) * 1.57079633f - 0.78539816f, t2 = t * t;
  // (products by the reciprocals, not divisions: a vector division costs as much as ten products)
  constexpr float k6 = 1.0f / 6, k20 = 1.0f / 20, k42 = 1.0f / 42, k72 = 1.0f / 72;
  constexpr float k2 = 1.0f / 2, k12 = 1.0f / 12, k30 = 1.0f / 30, k56 = 1.0f / 56, k90 = 1.0f / 90;
  const float st = t * (1.0f - t2 * k6 * (1.0f - t2 * k20 * (1.0f - t2 * k42 * (1.0f - t2 * k72))));
  const float ct = 1.0f - t2 * k2 * (1.0f - t2 * k12 * (1.0f - t2 * k30 * (1.0f - t2 * k56 * (1.0f - t2 * k90))));
  const float c = (ct - st) * 0.70710678f, s = (ct + st) * 0.70710678f;  // angle pi/4 + t
  const bool odd = (q & 1) != 0, flip_c = q == 1 || q == 2, flip_s = q >= 2;
  const float a = odd ? s : c, b = odd ? c : s;  // q odd: (cos, sin) = (-s, c) or (s, -c)
  cs = flip_c ? -a : a;
  sn = flip_s ? -b : b;
}

}  // namespace spe_detail
