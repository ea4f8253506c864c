"""The preflight's ``precision`` check (``imagenot.train.preflight``): bf16 autocast against
float32 from the same weights on the same batches, with nothing random between the two passes.

Why the random layers are switched off: reseeding both passes does not make dropout and
stochastic depth draw the same masks on CUDA (the kernels draw per dtype), so a healthy model
would fail on its random draws alone (AlexNet's gradient cosine 0.25, EfficientNet-V2-L's 0.61
on an H200 with the draws left on) and hold every GPU job. So dropout and stochastic depth run
as in evaluation (their own
``training`` flag only: BatchNorm stays in training mode, normalising over the batch as the loop
trains), and the bf16 pass is seeded apart from the float32 one, so that no part of the verdict
rests on shared draws, on the CPU (the tests) as on CUDA. A random layer this cannot find (a
plugin model drawing in its own code) shows as two float32 passes under different seeds that
disagree: the training steps are then not judged, and the check says so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from imagenot.train import feed_bench
from imagenot.train.feed import layout
from imagenot.train.schedules import build_optimizer

STEPS = 3
BATCH = 8
LOSS_RTOL = 0.05  # bf16 keeps ~3 significant digits; a broken kernel is off by far more
LOGITS_RTOL = 0.05
# a broken kernel gives ~0 or NaN; bf16 rounding of random-init gradients on a batch of 4-8
# gave 0.90-1.00 (tiny models, the CPU's bf16; ResNet-18 0.935 on an H200): noise, not a fault
GRAD_COSINE = 0.8
# class names of the stochastic-depth layers of the registry's libraries (torchvision's
# StochasticDepth, timm's DropPath); dropout is every torch.nn dropout module
STOCHASTIC_DEPTH = frozenset({"StochasticDepth", "DropPath"})
# two float32 passes under different seeds: equal but for the order of floating-point sums
# (cuDNN's backward kernels accumulate atomically) once nothing random is left
SAME_PASS_COSINE = 0.999
_SEEDS = {"fp32": 0, "bf16": 1_000, "again": 2_000}  # the passes' draws, kept apart


def switch_off_random_layers(model: nn.Module) -> list[str]:
    """Set the dropout and stochastic-depth modules of ``model`` (in training mode) to their
    evaluation behaviour, their own flag only; the names of those switched off."""
    off = []
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.dropout._DropoutNd) or (
            type(module).__name__ in STOCHASTIC_DEPTH
        ):
            module.training = False
            off.append(name)
    return off


def _loss_and_grad(model, x, labels, device: torch.device, bf16: bool, seed: int):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        loss = F.cross_entropy(model(x).float(), labels)
    loss.backward()
    grad = torch.cat([p.grad.flatten().float() for p in model.parameters() if p.grad is not None])
    return loss.item(), grad


def compare(
    build: Callable[[], nn.Module],
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
) -> dict:
    """bf16 autocast against float32 for the model ``build()`` makes, on ``batches`` (inputs
    already preprocessed, labels): over all but the last batch, one SGD step each (taken with
    the float32 gradients, so both passes see the same weights), each step's loss and the
    cosine of the two gradients; then evaluation logits and top-1 of the trained weights on the
    last batch. Random layers off and passes seeded apart (module docstring); ``random_left``
    is the cosine of two float32 gradients under different seeds on the first step."""
    torch.manual_seed(0)
    model = build().to(device, memory_format=layout(device))
    optimizer = build_optimizer(
        list(model.parameters()), {**feed_bench.HYPERPARAMETERS, "lr": 0.01}
    )
    model.train()
    switched = switch_off_random_layers(model)
    losses, cosines, same = {False: [], True: []}, [], None
    for step, (x, labels) in enumerate(batches[:-1]):
        # the same BatchNorm statistics for every pass: each starts from this state
        state = copy.deepcopy(model.state_dict())
        low, g_low = _loss_and_grad(model, x, labels, device, True, _SEEDS["bf16"] + step)
        if step == 0:
            model.load_state_dict(state)
            _, g_again = _loss_and_grad(model, x, labels, device, False, _SEEDS["again"])
        model.load_state_dict(state)
        high, g_high = _loss_and_grad(model, x, labels, device, False, _SEEDS["fp32"] + step)
        if step == 0:
            same = F.cosine_similarity(g_again, g_high, dim=0).item()
        losses[True].append(low)
        losses[False].append(high)
        cosines.append(F.cosine_similarity(g_low, g_high, dim=0).item())
        optimizer.step()  # with the float32 gradients, the last computed
    model.eval()
    logits = {}
    for bf16 in (False, True):
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits[bf16] = model(batches[-1][0]).float()
    del model, optimizer
    rel = [abs(b - f) / max(abs(f), 1e-6) for f, b in zip(losses[False], losses[True], strict=True)]
    diff = (logits[True] - logits[False]).norm() / logits[False].norm().clamp_min(1e-6)
    agree = (logits[True].argmax(1) == logits[False].argmax(1)).float().mean()
    return {
        "loss_fp32": [round(v, 5) for v in losses[False]],
        "loss_bf16": [round(v, 5) for v in losses[True]],
        "loss_rel_diff": round(max(rel), 5),
        "grad_cosine": round(min(cosines, key=lambda c: -1 if c != c else c), 5),  # NaN first
        "logits_rel_diff": round(diff.item(), 5),
        "top1_agreement": round(agree.item(), 4),
        "random_left": round(same, 5),
        "switched_off": switched,
    }


def verdict(values: dict) -> tuple[str, str]:
    """(status, detail) of :func:`compare`'s ``values``: pass when bf16 stays within
    :data:`LOSS_RTOL` of float32's losses, :data:`GRAD_COSINE` of its gradients and
    :data:`LOGITS_RTOL` of its evaluation logits. Where two float32 passes under different
    seeds disagree (a random layer left on) the training steps cannot be compared: only the
    evaluation logits are judged, with a warning that says why."""
    detail = (
        f"loss bf16 vs fp32 within {values['loss_rel_diff']:.2%} over {STEPS} steps, "
        f"gradient cosine >= {values['grad_cosine']:.3f}; "
        f"eval logits within {values['logits_rel_diff']:.2%}, top-1 agreement "
        f"{values['top1_agreement']:.0%} (random weights: near ties move); "
        f"{len(values['switched_off'])} dropout/stochastic-depth layers off for the comparison"
    )
    eval_ok = values["logits_rel_diff"] <= LOGITS_RTOL
    if not values["random_left"] >= SAME_PASS_COSINE:
        detail += (
            f"; two float32 passes under different seeds differ (gradient cosine "
            f"{values['random_left']:.3f}): a random layer the check could not switch off, so "
            "the training steps are not judged, only evaluation"
        )
        return ("warn" if eval_ok else "fail"), detail
    ok = eval_ok and values["loss_rel_diff"] <= LOSS_RTOL and values["grad_cosine"] >= GRAD_COSINE
    return ("pass" if ok else "fail"), detail
