"""SharedCodes with their gradient in factored form (`SineSPE.shared_code`, `SharedCode.sine`;
`ConvSPE.shared_code`): values and every gradient equal to the plain tuple path in float64
(prefixes, strided inputs, several flushes, a graph kept for a second backward), gradcheck; the
codes' storage reused from one pass to the next only once nothing else holds it (`spe.workspace`)."""

import pytest
import torch

import spe.conv
import spe.shared as shared_module
from spe import ConvSPE, SharedCode, SineSPE, SPEFilter
from spe import kernels
from spe.spectra import SeededSpectra, WindowSpectra
from spe.workspace import Workspace
from spe_helpers import layers_loss

pytestmark = pytest.mark.skipif(not kernels.available(), reason="the factored gradient needs the compiled "
                                "spe_kernels extension (make setup builds it)")

B, N, H, D, K = 3, 11, 2, 5, 3


def strided_rows(b, s, h, x):
    """A (B, S, H, X) float64 view with the strides of a (B, S, 3, H, X) qkv split (not contiguous)."""
    return torch.randn(b, s, 3, h, x, dtype=torch.float64)[:, :, 1]


def run_layers(pe, filters, noise, inputs, eps, factored, positions=N + 4, retain=False, start=0, code=None):
    """Filters (layers) over one code of `positions` positions from `start` (or over `code`, given
    with R as `noise`): outputs and gradients (inputs, gates, generator parameters) of a fixed loss."""
    R = noise if code is not None else noise.shape[0] if isinstance(pe, ConvSPE) else noise.shape[-1]
    if code is None:
        code = pe.shared_code(noise, start, positions) if factored else pe.codes(noise, start, positions)
    assert isinstance(code, SharedCode) == factored
    assert not factored or isinstance(code.gradients, shared_module.PendingGradients)
    weights = torch.randn(B, N, H, R, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    outs, loss, leaves = layers_loss(pe, filters, inputs, eps, code, weights)
    grads = torch.autograd.grad(loss, leaves, retain_graph=retain)
    if retain:
        return outs, grads, torch.autograd.grad(loss, leaves)
    return outs, grads


def setup(R, layers=3, conv=False):
    torch.manual_seed(R)
    pe = (ConvSPE(1, H, D, R, kernel_size=4) if conv else SineSPE(H, D, R, K)).double()
    filters = [SPEFilter(True, (H, D)).double() for _ in range(layers)]
    inputs = [(strided_rows(B, N, H, D).requires_grad_(), strided_rows(B, N, H, D).requires_grad_())
              for _ in filters]
    noise = pe.draw_noise(N + 4 + 700 if conv else N, R)               # conv: positions are bounded
    return pe, filters, noise, inputs, [f.draw_gate_noise(R).double() for f in filters]


@pytest.mark.parametrize("R", [6, 64])                     # 64: the kernels' fixed-length loops
@pytest.mark.parametrize("flush_rows", [shared_module.FACTOR_FLUSH_ROWS, 4])  # one pass, several
@pytest.mark.parametrize("start", [0, 700])                # the frequencies' gradient weighs positions
@pytest.mark.parametrize("conv", [False, True], ids=["sine", "conv"])
def test_factored_shared_code_equals_tuple_path(monkeypatch, R, flush_rows, start, conv):
    monkeypatch.setattr(shared_module, "FACTOR_FLUSH_ROWS", flush_rows)
    if conv:                                                            # FFTs and gradients one head at a time
        monkeypatch.setattr(spe.conv, "CHUNK_BYTES", 1)
    pe, filters, noise, inputs, eps = setup(R, conv=conv)
    reference = run_layers(pe, filters, noise, inputs, eps, factored=False, start=start)
    factored = run_layers(pe, filters, noise, inputs, eps, factored=True, start=start)
    for got, want in zip(factored[0] + list(factored[1]), reference[0] + list(reference[1])):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("conv", [False, True], ids=["sine", "conv"])
def test_factored_shared_code_supports_a_second_backward(conv):
    pe, filters, noise, inputs, eps = setup(6, layers=2, conv=conv)
    _, first, second = run_layers(pe, filters, noise, inputs, eps, factored=True, retain=True)
    _, reference = run_layers(pe, filters, noise, inputs, eps, factored=False)
    for a, b, want in zip(first, second, reference):
        torch.testing.assert_close(a, want)
        torch.testing.assert_close(b, want)


def test_factored_shared_code_gradcheck():
    """With respect to the inputs and to the code's factors (omega_q, omega_k, z) themselves."""
    torch.manual_seed(4)
    filt = SPEFilter(True, (H, D)).double()
    eps = filt.draw_gate_noise(4).double()
    q = torch.randn(2, 5, H, D, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, H, D, dtype=torch.float64, requires_grad=True)
    factors = [torch.randn(6, H, D, 2 * K, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    z = torch.randn(H, D, 2 * K, 4, dtype=torch.float64, requires_grad=True)

    def function(q, k, omega_q, omega_k, z):                            # a 6-position code, 5 used
        return filt(q, k, SharedCode.sine(omega_q, omega_k, z), gate_noise=eps)

    assert torch.autograd.gradcheck(function, (q, k, *factors, z))


def test_without_gradients_nothing_is_tracked():
    pe = SineSPE(H, D, 6, K)
    with torch.no_grad():
        code = pe.shared_code(pe.draw_noise(N, 6), 0, N)
    assert code.link is None and code.codes[0].shape == (N, H, D, 6)


@pytest.mark.parametrize("pe, size, backend", [(SineSPE(H, D, 6, K), N, "torch"), (ConvSPE(1, H, D, 6, 3), N, "torch"),
                                                (ConvSPE(2, H, D, 6, 3), (4, 5), None)], ids=["sine", "conv", "conv2d"])
def test_torch_backend_and_2d_keep_the_buffer_path(pe, size, backend):
    code = pe.shared_code(pe.draw_noise(size, 6), 0, size, backend=backend)
    assert not isinstance(code.gradients, shared_module.PendingGradients)


def training_pass(pe, filt, noise, x):
    """One forward and backward through a factored SharedCode, the loss kept afterwards as a training
    loop keeps it until its next assignment; returns the loss and the storage address of qbar."""
    code = pe.shared_code(noise, 0, N)
    address = code.codes[0].data_ptr()
    qhat, khat = filt(x, x, code)
    loss = qhat.square().sum() + khat.sum()
    loss.backward()
    return loss, address


def test_codes_storage_is_reused_once_free_and_only_then():
    torch.manual_seed(0)
    pe, filt = SineSPE(H, D, 8, K), SPEFilter(False)
    noise, x = pe.draw_noise(N, 8), torch.randn(B, N, H, D)
    loss, first = training_pass(pe, filt, noise, x)
    grads = pe.freqs.grad.clone()
    pe.zero_grad()
    loss, second = training_pass(pe, filt, noise, x)                    # previous loss still referenced
    assert second == first                                              # its graph holds no code
    torch.testing.assert_close(pe.freqs.grad, grads)                    # same values from reused memory
    kept = pe.shared_code(noise, 0, N)                                  # held by the caller
    assert kept.codes[0].data_ptr() == first
    assert pe.shared_code(noise, 0, N).codes[0].data_ptr() != first     # so not overwritten
    reference = pe.codes(noise, 0, N)[0][0]
    torch.testing.assert_close(kept.codes[0], reference)


def test_workspace_reuses_only_unreferenced_matching_tensors():
    workspace, like = Workspace(), torch.zeros(1)
    first = workspace.empty("a", (4, 3), like)
    address = first.data_ptr()
    del first
    second = workspace.empty("a", (4, 3), like)
    assert second.data_ptr() == address                                 # free: reused
    view = second[:2]
    del second
    assert workspace.empty("a", (4, 3), like).data_ptr() != address     # a view holds it
    del view
    assert workspace.empty("a", (4, 3), like.double()).dtype == torch.float64
    assert workspace.empty("a", (2, 3), like).shape == (2, 3)
    saved = workspace.empty("b", (5,), like)
    weight = torch.ones(5, requires_grad=True)
    product = weight * saved                                            # autograd saves `saved`
    address = saved.data_ptr()
    del saved
    assert workspace.empty("b", (5,), like).data_ptr() != address
    del product
    workspace.clear()


@pytest.mark.parametrize("J", [6, 10, 18])                 # 2K; above 16 the lane sums run twice
@pytest.mark.parametrize("S, D", [(9, 5), (70, 8)])        # tiles of 32 positions and their tails;
def test_float32_sine_gradient_kernels_equal_float64_reference(J, S, D):  # D = 8: four rows at a time
    """The float32 paths of rows of 64 (butterfly sums across lanes) of the sine code's gradient, from
    a stored code gradient and from the layers' triples, against float64 einsums."""

    torch.manual_seed(J)
    R = 64
    omega, z = torch.randn(S, H, D, J, dtype=torch.float64), torch.randn(H, D, J, R, dtype=torch.float64)
    xs = [strided_rows(b, S, H, D) for b in (3, 2)]
    gs = [strided_rows(b, S, H, R) for b in (3, 2)]
    scales = [torch.rand(H, D, dtype=torch.float64), None]
    G = sum(torch.einsum("bshd,bshr->shdr", x if a is None else x * a, g) for x, g, a in zip(xs, gs, scales))
    want_omega, want_z = torch.einsum("shdr,hdjr->shdj", G, z), torch.einsum("shdj,shdr->hdjr", omega, G)
    compiled, single = kernels.module(), (omega.float(), z.float())
    got_omega, got_z = compiled.sine_code_backward(G.float().contiguous(), *single)
    tolerance = {"atol": 1e-4, "rtol": 1e-4}
    torch.testing.assert_close(got_omega.double(), want_omega, **tolerance)
    torch.testing.assert_close(got_z.double(), want_z, **tolerance)
    got_omega, got_z = torch.zeros_like(single[0]), torch.zeros_like(single[1])
    triples = ([x.float() for x in xs], [g.float() for g in gs], [None if a is None else a.float() for a in scales])
    compiled.sine_pairs_backward(got_omega, got_z, *triples, *single)
    torch.testing.assert_close(got_omega.double(), want_omega, **tolerance)
    torch.testing.assert_close(got_z.double(), want_z, **tolerance)
    # omega's gradient taken on to phases (omega = (cos, sin) pairs): their sums, plain and by position
    phase = want_omega[..., 1::2] * omega[..., 0::2] - want_omega[..., 0::2] * omega[..., 1::2]  # (S, H, D, K)
    positions = torch.arange(S, dtype=torch.float64)[:, None, None, None]
    got_sums, got_z = torch.ones(2, H, D, J // 2, dtype=torch.float64), torch.zeros_like(single[1])  # added to
    compiled.sine_pairs_phase_backward(got_sums, got_z, *triples, *single)
    torch.testing.assert_close(got_sums, 1 + torch.stack([phase.sum(0), (positions * phase).sum(0)]), **tolerance)
    torch.testing.assert_close(got_z.double(), want_z, **tolerance)


@pytest.mark.skipif(not kernels.available(), reason="spe_kernels is not installed")
@pytest.mark.parametrize("start", [0, 1_000_003])
def test_compiled_sine_features_equal_the_reference(start):
    torch.manual_seed(2)
    pe = SineSPE(num_heads=3, in_features=4, num_realizations=8, num_sines=5)
    with torch.no_grad():
        pe.offsets.normal_(0.0, 4.0)                                    # any real offset, not only [0, 2 pi)
        got = pe._omegas_at(start, 300)
        want = pe._omegas(torch.arange(start, start + 300))
    for g, w in zip(got, want):
        assert g.shape == (300, 3, 4, 10) and g.is_contiguous()
        torch.testing.assert_close(g, w, atol=2e-6, rtol=0)


def test_copies_of_a_generator_start_with_an_empty_workspace():
    import copy
    import pickle

    pe = SineSPE(H, D, 6, K)
    pe.shared_code(pe.draw_noise(N, 6), 0, N)
    assert pe._workspace._tensors                                       # the codes are kept
    assert not copy.deepcopy(pe)._workspace._tensors
    assert not pickle.loads(pickle.dumps(pe))._workspace._tensors


def test_frequencies_changed_between_forward_and_backward_raise():
    """The backward computes the omegas again (they are not kept through the step): an in-place
    change of the frequencies in between would give wrong gradients, so it raises."""
    pe, filt = SineSPE(H, D, 6, K), SPEFilter(False)
    qhat, khat = filt(torch.randn(B, N, H, D), torch.randn(B, N, H, D), pe.shared_code(pe.draw_noise(N, 6), 0, N))
    with torch.no_grad():
        pe.freqs.add_(0.1)
    with pytest.raises(RuntimeError, match="modified in place"):
        (qhat.sum() + khat.sum()).backward()


@pytest.mark.parametrize("flush_rows", [shared_module.FACTOR_FLUSH_ROWS, 4])
def test_conv_code_from_a_seed_draws_its_spectra_again(monkeypatch, flush_rows):
    """`ConvSPE.seeded_code` filters the spectra drawn from the seed and draws them again in the
    backward, keeping no noise: values and gradients equal the tuple path's on the noise that seed
    gives (`noise_from_seed`); chunks of 3 channels."""
    monkeypatch.setattr(shared_module, "FACTOR_FLUSH_ROWS", flush_rows)
    monkeypatch.setattr(spe.conv, "CHUNK_BYTES", 3 * 6 * 18 * 8)       # 3 channels of R 6, FFT 18, float64
    pe, filters, _, inputs, eps = setup(6, conv=True)
    seed = 2**63 + 5
    positions = N + 4
    noise = pe.noise_from_seed(positions, seed, 6)
    expected_outs, expected = run_layers(pe, filters, noise, inputs, eps, factored=False)
    code = pe.seeded_code(seed, positions, 6)
    assert isinstance(code.gradients.spectra, SeededSpectra)
    outs, grads = run_layers(pe, filters, 6, inputs, eps, factored=True, code=code)
    torch.testing.assert_close(outs, expected_outs)
    torch.testing.assert_close(list(grads), list(expected))


def test_conv_code_of_a_noise_keeps_its_window():
    """A code of a given noise (here a later window) keeps that window for its backward."""
    pe, _, noise, _, _ = setup(6, conv=True)
    assert isinstance(pe.shared_code(noise, 700, N + 4).gradients.spectra, WindowSpectra)
