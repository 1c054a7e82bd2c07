// Shared by the spe_kernels sources: dtype dispatch and shape checks of the (S, H, D, R) layout.
#pragma once

#include <torch/extension.h>
#include <ATen/Parallel.h>

namespace spe_detail {

constexpr int64_t kGrain = 16;  // (s, h) blocks per parallel task

// Calls f(scalar_t{}) for the float32 / float64 tensor t (a plain function, not AT_DISPATCH: the
// loops below carry pragmas, which cannot stand inside a macro argument).
template <typename F>
inline void dispatch(const at::Tensor& t, F f) {
  if (t.scalar_type() == at::kFloat) {
    f(float(0));
  } else if (t.scalar_type() == at::kDouble) {
    f(double(0));
  } else {
    TORCH_CHECK(false, "spe_kernels support float32 and float64, got ", t.scalar_type());
  }
}

// The dtype a kernel computes in for a code: the code's own, or float32 for a float16 code (stored
// in half precision, each block read as float: half.h).
inline at::ScalarType compute_type(const at::Tensor& code) {
  return code.scalar_type() == at::kHalf ? at::kFloat : code.scalar_type();
}

inline void check_code(const at::Tensor& code, const char* name) {
  TORCH_CHECK(code.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(code.dim() == 4 && code.is_contiguous(), name, " must be a contiguous (S, H, D, R) tensor");
}

inline void check_rows(const at::Tensor& t, const at::Tensor& code, int64_t last, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 4, name, " must be a (B, S, H, *) CPU tensor");
  TORCH_CHECK(t.scalar_type() == compute_type(code), name, " must have the code's dtype (float32 for a float16 "
              "code), got ", t.scalar_type(), " for a ", code.scalar_type(), " code");
  TORCH_CHECK(t.size(1) == code.size(0) && t.size(2) == code.size(1) && t.size(3) == last, name,
              " has shape ", t.sizes(), ", which does not match the code ", code.sizes());
}

// A gate's (H, D) tensor (a, c or a scale) for a code (S, H, D, R): contiguous, of the code's compute dtype.
inline void check_gate_hd(const at::Tensor& t, const at::Tensor& code, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == compute_type(code) &&
              t.dim() == 2 && t.size(0) == code.size(1) && t.size(1) == code.size(2), name,
              " must be a contiguous (H, D) CPU tensor of the code's dtype, got ", t.sizes());
}

}  // namespace spe_detail
