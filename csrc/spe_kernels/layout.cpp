// Layout kernel of convSPE's code (spe/conv.py holds the PyTorch reference): the FFTs run along
// the last axis, (R, C, S), while the contraction reads (S, C, R). torch's permuted copy of such a
// tensor walks one side with a stride of C*S elements; here each (A, B) plane is copied in square
// tiles that stay in L1.
#include "common.h"

namespace spe_detail {

constexpr int64_t kTile = 32;

// out[b, c, a] = x[a, c, b]: (A, C, B) with any strides -> (B, C, A), a new contiguous tensor or
// `out`, whose last dimension must be contiguous (a crop of a longer buffer: the FFTs' padding).
at::Tensor swap_outer(const at::Tensor& x, c10::optional<at::Tensor> out_arg) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 3, "x must be an (A, C, B) CPU tensor, got ", x.sizes());
  const int64_t A = x.size(0), C = x.size(1), B = x.size(2);
  const int64_t sa = x.stride(0), sc = x.stride(1), sb = x.stride(2);
  at::Tensor out;
  if (out_arg.has_value()) {
    out = *out_arg;
    TORCH_CHECK(out.device().is_cpu() && out.scalar_type() == x.scalar_type() && out.dim() == 3 &&
                out.size(0) == B && out.size(1) == C && out.size(2) == A && out.stride(2) == 1,
                "out must be a (B, C, A) CPU tensor of x's dtype with a contiguous last dimension, got ",
                out.sizes());
  } else {
    out = at::empty({B, C, A}, x.options());
  }
  const int64_t ob = out.stride(0), oc = out.stride(1);
  const int64_t a_tiles = (A + kTile - 1) / kTile, b_tiles = (B + kTile - 1) / kTile;
  dispatch(x, [&](auto zero) {
    using scalar_t = decltype(zero);
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, C * b_tiles, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {  // task = (c, tile of b)
        const int64_t c = task / b_tiles, b0 = (task % b_tiles) * kTile, b1 = std::min(b0 + kTile, B);
        for (int64_t t = 0; t < a_tiles; ++t) {
          const int64_t a0 = t * kTile, a1 = std::min(a0 + kTile, A);
          for (int64_t b = b0; b < b1; ++b) {
            const scalar_t* src = xp + c * sc + b * sb;
            scalar_t* __restrict__ dst = op + b * ob + c * oc;
            for (int64_t a = a0; a < a1; ++a) dst[a] = src[a * sa];
          }
        }
      }
    });
  });
  return out;
}

}  // namespace spe_detail
