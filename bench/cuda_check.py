"""The model on a GPU: CUDA equals CPU, every SPE path equals plain autograd, bf16 autocast stays close,
recurrent steps equal the parallel forward.

The test suite runs on CPUs only (CI has no GPU); run this where one is available. For each positional
encoding a small model (2 layers, d_model 64, 300 positions, so that generation crosses code blocks)
is compared with itself in float64 on the CPU: relative max differences of the logits and of every
parameter gradient. Printed per line: what was compared, then (logits, gradients); it exits with
status 1 if any difference exceeds its tolerance.

    python -m bench.cuda_check
    python -m bench.cuda_check --device cpu     # the same comparisons on the CPU (what the test runs)
"""

from __future__ import annotations

import argparse
import json

import torch

from model import ModelConfig, MusicPerformer
from model.positional import PositionalNoise

PATHS = {"sine_spe": ("stored", "autograd", "factorised"), "conv_spe": ("stored", "autograd"),
         "ape": ("default",), "rope": ("default",)}
TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "bf16": 5e-2, "step": 1e-4}  # relative max, per comparison


def small_model(pe: str, length: int) -> MusicPerformer:
    torch.manual_seed(0)
    # code_dtype float32: the code as computed (float16 storage is a rounding chosen for CPU training,
    # tested in tests/spe/test_spe_half_codes.py, not a device's numerics)
    cfg = ModelConfig(vocab_size=300, n_layer=2, n_head=4, d_model=64, d_ff=128, dropout=0.0, pe=pe,
                      num_realizations=16, num_sines=5, kernel_size=33, feature_dims=32, attention="torch",
                      max_len=length, code_dtype="float32")
    return MusicPerformer(cfg).double().train()


def noise_as(noise: PositionalNoise | None, device: torch.device, dtype: torch.dtype) -> PositionalNoise | None:
    if noise is None:
        return None
    gates = None if noise.gate_noises is None else [n.to(device, dtype) for n in noise.gate_noises]
    return PositionalNoise([n.to(device, dtype) for n in noise.code_noises], gates, noise.length)


def logits_and_grads(model: MusicPerformer, tokens: torch.Tensor, noise, path: str, bf16: bool = False):
    """(logits, {name: grad}) in float64 on the CPU, for a loss touching every position."""
    if model.cfg.is_spe:
        model.pe.contraction = None if path == "stored" else path
    model.zero_grad(set_to_none=True)
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(tokens, positional_noise=noise)[0]
    (logits.float().square().mean() + logits[:, -1].float().sum()).backward()
    grads = {name: p.grad.detach().cpu().double() for name, p in model.named_parameters() if p.grad is not None}
    return logits.detach().cpu().double(), grads


def relative(result, reference) -> tuple[float, float]:
    """Max |difference| / max |reference| of the logits, and the worst such ratio over the gradients."""
    (logits, grads), (ref_logits, ref_grads) = result, reference
    if set(grads) != set(ref_grads):
        raise AssertionError(f"gradients of different parameters: {sorted(set(grads) ^ set(ref_grads))}")
    value = ((logits - ref_logits).abs().max() / ref_logits.abs().max().clamp_min(1e-12)).item()
    grad = max(((grads[k] - ref_grads[k]).abs().max() / ref_grads[k].abs().max().clamp_min(1e-12)).item()
               for k in ref_grads)
    return value, grad


def check(device: torch.device, length: int = 300) -> list[dict]:
    """Every comparison for every positional encoding: a list of {what, logits, grads, tolerance}."""
    rows = []
    for pe, paths in PATHS.items():
        model = small_model(pe, length)
        tokens = torch.randint(0, 300, (2, length), generator=torch.Generator().manual_seed(1))
        noise = noise_as(model.draw_positional_noise(length), torch.device("cpu"), torch.float64)
        reference = logits_and_grads(model, tokens, noise, "stored")
        model.to(device)
        for dtype, name in ((torch.float64, "float64"), (torch.float32, "float32")):
            model.to(dtype)
            for path in paths:
                result = logits_and_grads(model, tokens.to(device), noise_as(noise, device, dtype), path)
                errors = dict(zip(("logits", "grads"), relative(result, reference)))
                rows.append({"what": f"{pe}/{path} {device.type} {name} vs cpu float64",
                             "tolerance": TOLERANCE[name], **errors})
        for path in paths:  # model in float32, as training keeps it
            result = logits_and_grads(model, tokens.to(device), noise_as(noise, device, torch.float32), path, bf16=True)
            rows.append({"what": f"{pe}/{path} {device.type} bf16 autocast vs cpu float64",
                         "tolerance": TOLERANCE["bf16"], **dict(zip(("logits", "grads"), relative(result, reference)))})
        rows.append(steps_against_parallel(model.eval(), tokens.to(device), noise_as(noise, device, torch.float32)))
        rows[-1]["what"] = f"{pe} {device.type} float32 recurrent steps vs parallel forward"
    return rows


def steps_against_parallel(model: MusicPerformer, tokens: torch.Tensor, noise) -> dict:
    if model.cfg.is_spe:
        model.pe.contraction = None
    with torch.no_grad():
        parallel = model(tokens, positional_noise=noise)[0]                  # (B, N, V)
        state = model.init_state(tokens.shape[0], positional_noise=noise)
        steps = []
        for t in range(tokens.shape[1]):
            logits, state = model.step(tokens[:, t], state)                  # (B, V)
            steps.append(logits)
    difference = (torch.stack(steps, dim=1) - parallel).abs().max() / parallel.abs().max()
    return {"logits": difference.item(), "grads": 0.0, "tolerance": TOLERANCE["step"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="device compared with the CPU (default: cuda)")
    parser.add_argument("--length", type=int, default=300, help="positions per sequence")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device is available (use --device cpu to run the comparisons on the CPU)")
    rows = check(device, args.length)
    failed = [row for row in rows if max(row["logits"], row["grads"]) > row["tolerance"]]
    for row in rows:
        flag = "FAIL" if row in failed else "ok"
        print(f"{flag:4} {row['what']}: logits {row['logits']:.2e}, grads {row['grads']:.2e} "
              f"(tol {row['tolerance']:.0e})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"{len(rows) - len(failed)} of {len(rows)} comparisons within tolerance")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
