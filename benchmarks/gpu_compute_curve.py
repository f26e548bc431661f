"""How a training step's time on one GPU depends on the local batch, measured on a real CUDA GPU.

Why: the estimator prices a job on k GPUs at local batch b/k from the one-GPU steps its inspection
timed at b, b/2 and b/4 (``perf/jobmodel.py``: compute affine in the local batch,
``t(m) = t_ref·(f + (1 − f)·m/b_ref)``). On a GPU a small batch leaves most of the device idle, so
the time per step stops falling as the batch shrinks; how far the affine term holds below b/4, and
on which models, decides how well the estimator prices 8, 16 or 32 GPUs for a job inspected on one.
This records the ground truth on the GPU at hand, as one-GPU rows of coddl's profile format
(``perf/table.py``), so that ``coddl estimate`` and the accuracy protocol can read them.

How: six models of the kinds in the bundled traces — ResNet-18 and ResNet-50 (224×224 images),
ViT-B/16, a 6-layer transformer language model (512 tokens), a 2-layer LSTM language model (128
tokens) and an embedding recommender (NCF-like) — each trained with synthetic data for every power
of two local batch from 1 up to ``--max-batch`` (or until the GPU's memory runs out), in fp32 (TF32
matrix units) and, with ``--amp``, in bf16 autocast as well. A step is forward, backward and the
optimizer's update, timed with CUDA events after warm-up steps; the median of ``--reps`` steps
counts.

    python benchmarks/gpu_compute_curve.py [--reps 8] [--max-batch 512] [--amp] [--out rows.csv]

Prints JSON (per model: local batch → median step seconds) on stdout and writes the profile rows to
``--out``. Exits 2 without CUDA.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from typing import Callable


def _models(torch, nn):  # noqa: ANN001, ANN202 - torch passed in so that the module imports without it
    """name → (model builder, input builder for a local batch b, loss function)."""
    import torchvision

    def images(b: int) -> tuple:
        return (torch.randn(b, 3, 224, 224),), torch.randint(0, 1000, (b,))

    def tokens(seq: int, vocab: int) -> Callable[[int], tuple]:
        return lambda b: ((torch.randint(0, vocab, (b, seq)),), torch.randint(0, vocab, (b, seq)))

    class TransformerLM(nn.Module):
        def __init__(self, vocab: int = 32000, d: int = 512) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.body = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True), 6,
                                              enable_nested_tensor=False)
            self.head = nn.Linear(d, vocab)

        def forward(self, x):  # noqa: ANN001, ANN201
            return self.head(self.body(self.emb(x)))

    class LstmLM(nn.Module):
        def __init__(self, vocab: int = 10000, d: int = 650) -> None:
            super().__init__()
            self.emb, self.rnn, self.head = nn.Embedding(vocab, d), nn.LSTM(d, d, 2, batch_first=True), nn.Linear(d, vocab)

        def forward(self, x):  # noqa: ANN001, ANN201
            return self.head(self.rnn(self.emb(x))[0])

    class Recommender(nn.Module):
        def __init__(self, users: int = 138_000, items: int = 27_000, d: int = 64) -> None:
            super().__init__()
            self.u, self.i = nn.Embedding(users, d), nn.Embedding(items, d)
            self.mlp = nn.Sequential(nn.Linear(2 * d, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 1))

        def forward(self, x):  # noqa: ANN001, ANN201
            return self.mlp(torch.cat([self.u(x[:, 0]), self.i(x[:, 1])], dim=1)).squeeze(1)

    def lm_loss(out, y):  # noqa: ANN001, ANN202
        return nn.functional.cross_entropy(out.flatten(0, 1).float(), y.flatten())

    def ncf_inputs(b: int) -> tuple:
        # 256 (user, item) pairs per sample, as NCF trains on many interactions per step
        return (torch.stack([torch.randint(0, 138_000, (b * 256,)), torch.randint(0, 27_000, (b * 256,))], 1),), \
            torch.rand(b * 256)

    ce = nn.functional.cross_entropy
    return {
        "resnet18": (lambda: torchvision.models.resnet18(), images, ce),
        "resnet50": (lambda: torchvision.models.resnet50(), images, ce),
        "vit_b_16": (lambda: torchvision.models.vit_b_16(), images, ce),
        "transformer_lm": (TransformerLM, tokens(512, 32000), lm_loss),
        "lstm_lm": (LstmLM, tokens(128, 10000), lm_loss),
        "ncf": (Recommender, ncf_inputs, lambda out, y: nn.functional.mse_loss(out.float(), y)),
    }


def measure(name: str, build, inputs, loss_fn, amp: bool, reps: int, max_batch: int, torch) -> dict:  # noqa: ANN001
    """{local batch: median step seconds} from batch 1 up, until max_batch or out of memory."""
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = build().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    times: dict[int, float] = {}
    b = 1
    while b <= max_batch:
        x, y = inputs(b)
        x, y = tuple(t.to(dev) for t in x), y.to(dev)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = loss_fn(model(*x), y)
            loss.backward()
            opt.step()

        try:
            for _ in range(3):
                step()
            torch.cuda.synchronize(dev)
            samples = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
        except torch.OutOfMemoryError:
            print(f"{name}: batch {b} does not fit", file=sys.stderr, flush=True)
            break
        finally:
            del x, y
            torch.cuda.empty_cache()
        times[b] = statistics.median(samples)
        b *= 2
    del model, opt
    torch.cuda.empty_cache()
    return {"param_bytes": params, "step_s": times}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=512)
    ap.add_argument("--amp", action="store_true", help="bf16 autocast runs too")
    ap.add_argument("--models", default="", help="comma-separated subset")
    ap.add_argument("--out", default=None, help="profile rows (CSV) to write")
    args = ap.parse_args()
    import torch
    from torch import nn

    if not torch.cuda.is_available():
        print("gpu_compute_curve: no CUDA device here", file=sys.stderr)
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    gpu = torch.cuda.get_device_name(0)
    models = _models(torch, nn)
    chosen = [m for m in (args.models.split(",") if args.models else models)]
    out: dict = {"device": gpu, "torch": torch.__version__, "reps": args.reps, "models": {}}
    rows = []
    for name in chosen:
        for amp in ((False, True) if args.amp else (False,)):
            label = f"{name}-bf16" if amp else name
            started = time.monotonic()
            result = measure(label, *models[name], amp, args.reps, args.max_batch, torch)
            out["models"][label] = result
            print(f"{label}: {len(result['step_s'])} batches in {time.monotonic() - started:.1f} s; "
                  + ", ".join(f"{b}:{s * 1e3:.1f}ms" for b, s in result["step_s"].items()), file=sys.stderr, flush=True)
            rows += [{"cluster": "h100-one-gpu", "model": label, "param_bytes": result["param_bytes"], "gpu_type": gpu,
                      "gpus": 1, "nodes": 1, "global_batch": b, "local_batch": b, "steps_per_s": 1.0 / s}
                     for b, s in result["step_s"].items()]
            if args.out and rows:  # after every model, so that a run stopped early keeps what it measured
                with open(args.out, "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=list(rows[0]))
                    w.writeheader()
                    w.writerows(rows)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
