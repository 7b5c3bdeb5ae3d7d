#!/usr/bin/env python3
"""GPTQ in plain PyTorch: the peer of bench/bench_gptq.cpp (scripts/bench_gptq runs both).

The algorithm of Frantar et al. 2022 with the reference implementation's structure: dead columns,
optional act-order, damping of 1% of the mean diagonal, upper Cholesky factor of H^-1, lazy
batch updates of `block` columns, one rank-1 tensor update per column inside a block, and group
parameters (min-max, asymmetric or symmetric) found at each group boundary from the current
weights. The problem is generated from the seed exactly as bench_gptq.cpp does, so both quantize
the same layer (the checksums printed by both confirm it).
"""
import argparse
import sys
import time

import torch


def group_params(x, maxq, sym):
    """(scale, zero) per row of x (rows, k), the GPTQ reference quantizer's min-max rule."""
    xmin = x.min(1).values.clamp(max=0)
    xmax = x.max(1).values.clamp(min=0)
    if sym:
        xmax = torch.maximum(-xmin, xmax)
        xmin = -xmax
    empty = (xmin == 0) & (xmax == 0)
    xmin = torch.where(empty, -1.0, xmin)
    xmax = torch.where(empty, 1.0, xmax)
    scale = (xmax - xmin) / maxq
    zero = torch.full_like(scale, (maxq + 1) / 2) if sym else torch.round(-xmin / scale)
    return scale, zero


def gptq(weight, hessian, bits, group, block, damp_percent=0.01, act_order=False, sym=False):
    """Returns (Q, loss) with Q in the original column order."""
    W = weight.clone().float()
    H = hessian.clone().float()
    rows, cols = W.shape
    maxq = 2**bits - 1
    group = cols if group == -1 else group
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    if act_order:  # dynamic groups in act-order; static groups are not needed for timing
        perm = torch.argsort(torch.diag(H), descending=True, stable=True)
        W = W[:, perm]
        H = H[perm][:, perm]
    H.diagonal().add_(damp_percent * torch.mean(torch.diag(H)))
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    del H
    Q = torch.zeros_like(W)
    loss = 0.0
    scale = zero = None
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        W1 = W[:, i1:i2].clone()
        Err = torch.zeros_like(W1)
        U1 = U[i1:i2, i1:i2]
        for i in range(i2 - i1):
            j = i1 + i
            if j % group == 0:
                # The group's current weights: inside the block W1 is up to date; columns past
                # the block still miss this block's updates so far.
                width = min(group, cols - j)
                inside = min(width, i2 - j)
                current = W1[:, i:i + inside]
                if width > inside:
                    later = W[:, i2:j + width] - Err[:, :i] @ U[i1:j, i2:j + width]
                    current = torch.cat([current, later], 1)
                scale, zero = group_params(current, maxq, sym)
            w = W1[:, i]
            d = U1[i, i]
            q = (torch.clamp(torch.round(w / scale) + zero, 0, maxq) - zero) * scale
            Q[:, j] = q
            err = (w - q) / d
            loss += float(((w - q) ** 2).sum() / (2 * d * d))
            W1[:, i:] -= err.unsqueeze(1) @ U1[i, i:].unsqueeze(0)
            Err[:, i] = err
        W[:, i2:] -= Err @ U[i1:i2, i2:]
    if act_order:
        Q = Q[:, torch.argsort(perm)]
    return Q, loss


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-features", type=int, default=4096)
    p.add_argument("--in-features", type=int, default=4096)
    p.add_argument("--bits", type=int, default=4)
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--act-order", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rank", type=int, default=256)
    p.add_argument("--out", help="write Q here (raw float32, row-major)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    with torch.inference_mode():
        g = torch.Generator().manual_seed(a.seed)
        w = torch.randn((a.out_features, a.in_features), generator=g) * 0.02
        b = torch.randn((a.in_features, a.rank), generator=g)
        m = torch.rand(a.in_features, generator=g) * 2 + 0.2
        h = (torch.matmul(b, b.t()) / a.rank + torch.eye(a.in_features) * 0.1) * m.unsqueeze(1) \
            * m.unsqueeze(0)
        print(f"inputs: sum(W) {w.sum(dtype=torch.float64).item():.9e} "
              f"sum(H) {h.sum(dtype=torch.float64).item():.9e}")
        best = None
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            q, loss = gptq(w, h, a.bits, a.group_size, a.block_size, act_order=a.act_order)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
    print(f"torch gptq {a.out_features}x{a.in_features} W{a.bits} group {a.group_size} block "
          f"{a.block_size}{' act-order' if a.act_order else ''}, {a.threads} thread(s): {best:.3f} s")
    print(f"RESULT seconds={best:.6f} loss={loss:.9e}")
    if a.out:
        q.contiguous().numpy().tofile(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
