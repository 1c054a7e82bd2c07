// CPU kernels of SPE's per-position code contraction (spe/contract.py is the reference), plain and
// gated, and the module's bindings (the sineSPE code kernels are in sine.cpp, convSPE's layout
// kernels in layout.cpp and its spectral correlation in spectral.cpp).
//
//   E[s, h, d, r] = a[h, d] code[s, h, d, r] + c[h, d] noise[h, d, r]   (the effective code; E = code
//                                                                         without a gate)
//   forward:    out[b, s, h, r]  = sum_d x[b, s, h, d] E[s, h, d, r]
//   backward:   gx[b, s, h, d]   = sum_r g[b, s, h, r] E[s, h, d, r]
//               with P[s, h, d, r] = sum_b x[b, s, h, d] g[b, s, h, r]:
//               grad_a[h, d] = sum_{s, r} code P,  Psum[h, d, r] = sum_s P  (grad_c, grad_noise follow),
//               buf[s, h, d, r] += a[h, d] P  (the code gradient, in place)
//   accumulate: buf[s, h, d, r] += sum_t sum_b x_t[b, s, h, d] scale_t[h, d] g_t[b, s, h, r]
//
// code and buf are contiguous (S, H, D, R); x and g may have any strides. Each (s, h) block of the
// code (D x R) is read once per call (the forward asks for the next block ahead of use) and reused
// for every batch row while it sits in cache, which is what torch.bmm cannot do well for the tiny
// per-position (B x D) @ (D x R) products; the effective block is formed one row at a time, never
// stored. The loops over R are compiled for R = 64 and 32 with a fixed trip count (rows.h), at run
// time for other R. A float16 code (a float32 code stored in half precision: spe.shared.storage_dtype)
// is read as float32 values, converted in registers (the forward's vector path) or a block at a time
// into a small buffer (everywhere else); x, g, the gate and the outputs are then float32.
#include "common.h"
#include "half.h"
#include "rows.h"

#include <algorithm>
#include <vector>

namespace spe_detail {

at::Tensor sine_code(const at::Tensor& omega, const at::Tensor& z, c10::optional<at::Tensor> out);  // sine.cpp
std::vector<at::Tensor> sine_omegas(const at::Tensor& freqs, const at::Tensor& offsets, int64_t start, int64_t length);
std::vector<at::Tensor> sine_code_backward(const at::Tensor& g, const at::Tensor& omega, const at::Tensor& z);
void sine_pairs_backward(at::Tensor& grad_omega, at::Tensor& grad_z, const std::vector<at::Tensor>& xs,
                         const std::vector<at::Tensor>& gs, const std::vector<c10::optional<at::Tensor>>& scales,
                         const at::Tensor& omega, const at::Tensor& z);
void sine_pairs_phase_backward(at::Tensor& sums, at::Tensor& grad_z, const std::vector<at::Tensor>& xs,
                               const std::vector<at::Tensor>& gs, const std::vector<c10::optional<at::Tensor>>& scales,
                               const at::Tensor& omega, const at::Tensor& z);
at::Tensor swap_outer(const at::Tensor& x, c10::optional<at::Tensor> out);                   // layout.cpp
void normal_fill(at::Tensor& out, int64_t seed, int64_t offset, int64_t row_stride);            // normal.cpp
std::vector<int64_t> philox4x32(const std::vector<int64_t>& counter, const std::vector<int64_t>& key);
void accumulate_positions_last(at::Tensor& out, const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& gs,
                               const std::vector<c10::optional<at::Tensor>>& scales, int64_t h0);
std::vector<at::Tensor> spectral_correlation(const at::Tensor& z, const std::vector<at::Tensor>& gs);  // spectral.cpp

namespace {

// The gate of a gated call. Either all three tensors (a, c: (H, D), noise: (H, D, R), contiguous)
// or none (the ungated contraction).
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
  TORCH_CHECK(gate.noise.device().is_cpu() && gate.noise.scalar_type() == compute_type(code) &&
              gate.noise.dim() == 3 && gate.noise.size(0) == code.size(1) &&
              gate.noise.size(1) == code.size(2) && gate.noise.size(2) == code.size(3),
              "noise must be an (H, D, R) CPU tensor of the code's dtype (float32 for a float16 code), got ",
              gate.noise.sizes());
  return gate;
}

// The gate's raw pointers (a, c (H, D), noise (H, D, R)), all null without a gate: taken once per call,
// as data_ptr() costs more than one row's arithmetic.
template <typename scalar_t>
struct GatePtrs {
  const scalar_t *a = nullptr, *c = nullptr, *noise = nullptr;
  explicit GatePtrs(const GateTensors& g) {
    if (g.on) {
      a = g.a.data_ptr<scalar_t>();
      c = g.c.data_ptr<scalar_t>();
      noise = g.noise.data_ptr<scalar_t>();
    }
  }
};

// The (s, h) blocks (D x R values) of a code, for a kernel computing in scalar_t: pointers into the code
// when it has that dtype, or for a float16 code (scalar_t float) each block converted into the
// caller's buffer of D R floats, read from memory in half the bytes.
template <typename scalar_t>
class CodeBlocks {
 public:
  CodeBlocks(const at::Tensor& code, int64_t block_size) : size_(block_size) {
    if (code.scalar_type() == at::kHalf) {
      TORCH_CHECK((std::is_same<scalar_t, float>::value), "a float16 code is read by float32 kernels only");
      half_ = code.data_ptr<at::Half>();
    } else {
      full_ = code.data_ptr<scalar_t>();
    }
  }
  bool converts() const { return half_ != nullptr; }
  const at::Half* half(int64_t i) const { return half_ + i * size_; }
  // block i, in the code or (a float16 code) in buf
  const scalar_t* get(int64_t i, scalar_t* buf) const {
    if (full_ != nullptr) return full_ + i * size_;
    if constexpr (std::is_same<scalar_t, float>::value) {
      half_to_float(buf, half_ + i * size_, size_);
      return buf;
    }
    return nullptr;  // not reached: the constructor refuses a float16 code for another scalar_t
  }
  // where block i lies in memory, and its bytes (for prefetching)
  const void* address(int64_t i) const {
    return full_ != nullptr ? static_cast<const void*>(full_ + i * size_) : static_cast<const void*>(half_ + i * size_);
  }
  int64_t bytes() const { return size_ * int64_t(full_ != nullptr ? sizeof(scalar_t) : sizeof(at::Half)); }

 private:
  const scalar_t* full_ = nullptr;
  const at::Half* half_ = nullptr;
  int64_t size_;
};

at::Tensor gated_forward(const at::Tensor& x, const at::Tensor& code, const c10::optional<at::Tensor>& a,
                         const c10::optional<at::Tensor>& c, const c10::optional<at::Tensor>& noise) {
  check_code(code, "code");
  check_rows(x, code, code.size(2), "x");
  const GateTensors gate = check_gate(a, c, noise, code);
  const int64_t B = x.size(0), S = code.size(0), H = code.size(1), D = code.size(2), R = code.size(3);
  // (B, S, H, R) with heads-first strides: the attention reads it as (B, H, S, R) (model/attention.py),
  // which then needs no copy
  auto out = at::empty({B, H, S, R}, x.options()).permute({0, 2, 1, 3});
  dispatch_rows(x, R, [&](auto zero, auto kr) {
    using scalar_t = decltype(zero);
    constexpr int64_t KR = decltype(kr)::value;
    const GatePtrs<scalar_t> gp(gate);
    const CodeBlocks<scalar_t> code_blocks(code, D * R);
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, S * H, kGrain, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> xv(B * D), erow(R), acc(B * R);  // x rows (B, D), one effective row, out (B, R)
      std::vector<scalar_t> cbuf(code_blocks.converts() ? D * R : 0);  // a float16 code's block, as float
      for (int64_t i = begin; i < end; ++i) {
        const int64_t s = i / H, h = i % H;
        if (i + 1 < end) prefetch_block(code_blocks.address(i + 1), code_blocks.bytes());
        gather(x, s, h, xv.data());
        const scalar_t* ga = gp.a ? gp.a + h * D : nullptr;
        const scalar_t* gc = gp.c ? gp.c + h * D : nullptr;
        const scalar_t* gn = gp.noise ? gp.noise + h * D * R : nullptr;
        bool formed = false;  // by the float16 path, which converts each code row in registers
#if defined(__GNUC__) && !defined(__clang__) && !defined(SPE_NO_VECTOR_PATHS)
        if constexpr (std::is_same<scalar_t, float>::value && KR == 64) {
          if (code_blocks.converts()) {
            combination_tiles(acc.data(), xv.data(), code_blocks.half(i), ga, gc, gn, B, D);
            formed = true;
          }
        }
#endif
        if (!formed)
          block_combinations<scalar_t, KR>(acc.data(), xv.data(), code_blocks.get(i, cbuf.data()), ga, gc, gn, B, D,
                                           R, erow.data());
        for (int64_t b = 0; b < B; ++b)
          std::copy(acc.data() + b * R, acc.data() + (b + 1) * R, op + ((b * H + h) * S + s) * R);
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
    TORCH_CHECK(buf->sizes() == code.sizes() && buf->scalar_type() == compute_type(code),
                "buf must have the code's shape and its dtype (float32 for a float16 code)");
  }
  need_gate = need_gate && gate.on;
  const int64_t B = x.size(0), S = code.size(0), H = code.size(1), D = code.size(2), R = code.size(3);
  const int64_t blocks = S * H;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), blocks));
  at::Tensor grad_x = need_x ? at::empty({B, S, H, D}, x.options()) : at::Tensor();
  // per-chunk partial sums: grad_a (chunks, H, D) and Psum (chunks, H, D, R)
  at::Tensor part_a = need_gate ? at::zeros({chunks, H, D}, x.options()) : at::Tensor();
  at::Tensor part_p = need_gate ? at::zeros({chunks, H, D, R}, x.options()) : at::Tensor();
  const bool need_p = need_gate || add_buf;
  dispatch_rows(x, R, [&](auto zero, auto kr) {
    using scalar_t = decltype(zero);
    constexpr int64_t KR = decltype(kr)::value;
    const CodeBlocks<scalar_t> code_blocks(code, D * R);
    const GatePtrs<scalar_t> gp(gate);
    scalar_t* gxp = need_x ? grad_x.data_ptr<scalar_t>() : nullptr;
    scalar_t* bp = add_buf ? buf->data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
      std::vector<scalar_t> grows(B * R), xv(B * D);  // this block's grad rows (B, R) and x rows (B, D)
      std::vector<scalar_t> eblk(need_x && gate.on ? D * R : 0), prow(R), gx(B * D);  // effective block
      std::vector<scalar_t> cbuf(code_blocks.converts() ? D * R : 0);  // a float16 code's block, as float
      for (int64_t k = chunk_begin; k < chunk_end; ++k) {
        scalar_t* pa = need_gate ? part_a.data_ptr<scalar_t>() + k * H * D : nullptr;
        scalar_t* pp = need_gate ? part_p.data_ptr<scalar_t>() + k * H * D * R : nullptr;
        for (int64_t i = blocks * k / chunks; i < blocks * (k + 1) / chunks; ++i) {
          const int64_t s = i / H, h = i % H;
          gather(g, s, h, grows.data());
          if (need_p) gather(x, s, h, xv.data());
          const scalar_t* block = code_blocks.get(i, cbuf.data());
          if (need_x) {
            const scalar_t* e = block;  // the block, or the effective block formed here
            if (gate.on) {
              for (int64_t d = 0; d < D; ++d)
                effective_row<scalar_t, KR>(eblk.data() + d * R, e + d * R, gp.a[h * D + d], gp.c[h * D + d],
                                            gp.noise + (h * D + d) * R, R);
              e = eblk.data();
            }
            block_products<scalar_t, KR>(gx.data(), e, grows.data(), B, D, R);
          }
          if (need_p)
            gate_rows<scalar_t, KR>(xv.data(), grows.data(), B, block,
                                    need_gate ? pp + h * D * R : nullptr, need_gate ? pa + h * D : nullptr,
                                    add_buf ? bp + i * D * R : nullptr, gate.on ? gp.a + h * D : nullptr, D, R,
                                    prow.data());
          if (need_x)
            for (int64_t b = 0; b < B; ++b)
              std::copy(gx.data() + b * D, gx.data() + (b + 1) * D, gxp + ((b * S + s) * H + h) * D);
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

// The plain backward: gx = sum_r g code.
at::Tensor contract_backward(const at::Tensor& g, const at::Tensor& code) {
  check_code(code, "code");
  check_rows(g, code, code.size(3), "grad");
  // x only gives the batch size here: without a gate or buf it is never read
  const at::Tensor x = at::empty({g.size(0), code.size(0), code.size(1), code.size(2)},
                                 code.options().dtype(compute_type(code)));
  return gated_backward(g, x, code, c10::nullopt, c10::nullopt, c10::nullopt, c10::nullopt, true, false)[0];
}

// buf += sum_t sum_b x_t^T g_t: the code gradients of several calls (layers), gathered per block so
// that the buffer is read and written once for all of them. With scales (one (H, D) tensor or None
// per pair), x_t is read as x_t[b, s, h, d] scale_t[h, d]: the code gradient of a gated call
// (x a)^T g without an (x a) tensor.
void contract_accumulate_scaled(at::Tensor& buf, const std::vector<at::Tensor>& xs,
                                const std::vector<at::Tensor>& gs,
                                const std::vector<c10::optional<at::Tensor>>& scales) {
  check_code(buf, "buf");
  const std::vector<at::Tensor> scale = check_pairs(xs, gs, scales, buf, buf.size(3));
  const int64_t S = buf.size(0), H = buf.size(1), D = buf.size(2), R = buf.size(3);
  int64_t n = 0;  // rows of all calls together
  for (const auto& x : xs) n += x.size(0);
  dispatch_rows(buf, R, [&](auto zero, auto kr) {
    using scalar_t = decltype(zero);
    constexpr int64_t KR = decltype(kr)::value;
    scalar_t* bp = buf.data_ptr<scalar_t>();
    at::parallel_for(0, S * H, kGrain, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> rows(n * R), xv(n * D);  // this block's grad rows (n, R) and scaled x (n, D)
      for (int64_t i = begin; i < end; ++i) {
        const int64_t s = i / H, h = i % H;
        gather_pairs(xs, gs, scale, s, h, rows.data(), xv.data());
        for (int64_t d = 0; d < D; ++d)
          add_combination<scalar_t, KR>(bp + (i * D + d) * R, xv.data() + d, D, rows.data(), n, R);
      }
    });
  });
}

}  // namespace
}  // namespace spe_detail

using namespace spe_detail;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "CPU kernels of SPE's per-position code contraction";
  m.def("forward", &contract_forward, "out[b,s,h,r] = sum_d x[b,s,h,d] code[s,h,d,r]");
  m.def("backward", &contract_backward, "gx[b,s,h,d] = sum_r g[b,s,h,r] code[s,h,d,r]");
  m.def("sine_code", &sine_code, "code[s,h,d,r] = sum_j omega[s,h,d,j] z[h,d,j,r], new or into out",
        py::arg("omega"), py::arg("z"), py::arg("out") = py::none());
  m.def("sine_code_backward", &sine_code_backward, "(grad_omega, grad_z) of sine_code");
  m.def("sine_omegas", &sine_omegas,
        "[omega_q, omega_k] (L, H, D, 2K) float32: cos / sin of 2 pi frac(f (start + l)) (+ theta for the queries)",
        py::arg("freqs"), py::arg("offsets"), py::arg("start"), py::arg("length"));
  m.def("sine_pairs_backward", &sine_pairs_backward,
        "grad_omega, grad_z += the gradients of sine_code for the code gradient sum_t (x_t scale_t)^T g_t",
        py::arg("grad_omega"), py::arg("grad_z"), py::arg("xs"), py::arg("grads"), py::arg("scales"),
        py::arg("omega"), py::arg("z"));
  m.def("sine_pairs_phase_backward", &sine_pairs_phase_backward,
        "grad_z += as sine_pairs_backward; sums[0], sums[1] += sum_s dphase, sum_s s dphase (omega's gradient taken "
        "on to its phases, omega = (cos, sin) pairs)",
        py::arg("sums"), py::arg("grad_z"), py::arg("xs"), py::arg("grads"), py::arg("scales"), py::arg("omega"),
        py::arg("z"));
  m.def("swap_outer", &swap_outer, "out[b,c,a] = x[a,c,b]: (A, C, B) -> (B, C, A), new or into out",
        py::arg("x"), py::arg("out") = py::none());
  m.def("normal_fill", &normal_fill,
        "out[r] = samples offset + r row_stride .. of the normal draw keyed by seed (row_stride -1: a row's length)",
        py::arg("out"), py::arg("seed"), py::arg("offset") = 0, py::arg("row_stride") = -1);
  m.def("philox4x32", &philox4x32, "Philox4x32-10 of one counter (4 words) and key (2 words)",
        py::arg("counter"), py::arg("key"));
  m.def("accumulate_positions_last", &accumulate_positions_last,
        "out[r,(h-h0)*D+d,s] = sum_t sum_b x_t[b,s,h,d] (scale_t[h,d]) g_t[b,s,h,r] (written, not added)",
        py::arg("out"), py::arg("xs"), py::arg("grads"), py::arg("scales"), py::arg("h0"));
  m.def("spectral_correlation", &spectral_correlation,
        "[out_t[c,f] = sum_r z[r,c,f] conj(g_t[r,c,f]) for each g_t]: (R, c, F) complex spectra -> (c, F)",
        py::arg("z"), py::arg("gs"));
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
