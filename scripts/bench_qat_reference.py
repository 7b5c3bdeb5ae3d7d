#!/usr/bin/env python3
"""One qat-kd training step in plain PyTorch: the peer of bench/bench_qat_step.cpp.

scripts/bench_qat runs both on the same model and batch with the same threads. The model is a
Llama-style decoder written as nn.Modules (RMSNorm, rotary embeddings, grouped-query attention
through scaled_dot_product_attention, SwiGLU MLP, untied lm_head). The student replaces every
decoder Linear with a fake-quantized one: min-max RTN scales and zero points per group of input
columns (the last group may be smaller), frozen, and a straight-through estimator that passes the
gradient where the code is not clamped. The teacher is the float model under no_grad; the loss is
the forward KL(teacher || student) averaged over all positions; then backward, clip_grad_norm_ to
1.0 and torch.optim.AdamW. Weights and input_ids come from the safetensors file the C++ side wrote.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.input_layernorm = RMSNorm(a.hidden, 1e-6)
        self.self_attn = Attention(a.hidden, a.heads, a.kv_heads)
        self.post_attention_layernorm = RMSNorm(a.hidden, 1e-6)
        self.mlp = Mlp(a.hidden, a.intermediate)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, 1e-6)


class Llama(nn.Module):
    def __init__(self, a, theta=10000.0):
        super().__init__()
        self.model = Backbone(a)
        self.lm_head = nn.Linear(a.hidden, a.vocab, bias=False)
        head_dim = a.hidden // a.heads
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
        freqs = torch.outer(torch.arange(a.seq).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))


class FakeQuantSTE(torch.autograd.Function):
    """(clamp(round(w / s) + z, 0, maxq) - z) * s; the gradient passes where the code is in
    range."""

    @staticmethod
    def forward(ctx, w, scale, zero, maxq):
        code = torch.round(w / scale) + zero
        inside = (code >= 0) & (code <= maxq)
        ctx.save_for_backward(inside)
        return (code.clamp(0, maxq) - zero) * scale

    @staticmethod
    def backward(ctx, grad):
        (inside,) = ctx.saved_tensors
        return grad * inside, None, None, None


def rtn_params(w, bits, group):
    """Min-max asymmetric (scale, zero) per row and group of columns, (out, groups) each."""
    maxq = 2**bits - 1
    scales, zeros = [], []
    for start in range(0, w.shape[1], group):
        block = w[:, start:start + group]
        lo = block.amin(1).clamp(max=0)
        hi = block.amax(1).clamp(min=0)
        empty = (lo == 0) & (hi == 0)
        lo = torch.where(empty, -1.0, lo)
        hi = torch.where(empty, 1.0, hi)
        scale = (hi - lo) / maxq
        scales.append(scale)
        zeros.append(torch.round(-lo / scale))
    return torch.stack(scales, 1), torch.stack(zeros, 1)


class FakeQuantLinear(nn.Module):
    def __init__(self, linear, bits, group):
        super().__init__()
        w = linear.weight.detach()
        group = w.shape[1] if group == -1 else group
        self.weight = nn.Parameter(w.clone())
        self.maxq = 2**bits - 1
        scale, zero = rtn_params(w, bits, group)
        # Frozen: expanded once to one (scale, zero) per column, which also covers a smaller
        # last group.
        columns = w.shape[1]
        self.register_buffer("scale", scale.repeat_interleave(group, 1)[:, :columns].contiguous())
        self.register_buffer("zero", zero.repeat_interleave(group, 1)[:, :columns].contiguous())

    def quantized_weight(self):
        return FakeQuantSTE.apply(self.weight, self.scale, self.zero, self.maxq)

    def forward(self, x):
        return F.linear(x, self.quantized_weight())


def quantize_student(model, bits, group):
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(parent, name, FakeQuantLinear(child, bits, group))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=688)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--bits", type=int, default=2)
    p.add_argument("--group-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--weights", required=True, help="safetensors written by bench_qat_step")
    a = p.parse_args()
    torch.set_num_threads(a.threads)

    tensors = load_file(a.weights)
    ids = tensors.pop("input_ids")
    if tuple(ids.shape) != (a.batch, a.seq):
        sys.exit(f"{a.weights}: input_ids {tuple(ids.shape)} but --batch {a.batch} --seq {a.seq}")
    teacher = Llama(a)
    teacher.load_state_dict(tensors, strict=True)
    teacher.requires_grad_(False)
    student = Llama(a)
    student.load_state_dict(tensors, strict=True)
    quantize_student(student, a.bits, a.group_size)
    device = torch.device(a.device)
    teacher.to(device)
    student.to(device)
    ids = ids.to(device)
    params = [q for q in student.parameters() if q.requires_grad]
    # On a GPU the fused AdamW (one kernel for all tensors), as rqat's optimizer: the strongest
    # plain-PyTorch peer, not its default per-tensor loop.
    optimizer = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999),
                                  weight_decay=a.weight_decay, fused=device.type == "cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            teacher_logits = teacher(ids)
        student_logits = student(ids)
        vocab = student_logits.shape[-1]
        loss = F.kl_div(F.log_softmax(student_logits.view(-1, vocab), -1),
                        F.log_softmax(teacher_logits.view(-1, vocab), -1),
                        log_target=True, reduction="batchmean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, a.max_grad_norm)
        optimizer.step()
        return loss.item()

    with torch.no_grad():
        checksum = sum(m.quantized_weight().sum(dtype=torch.float64).item()
                       for m in student.modules() if isinstance(m, FakeQuantLinear))
    print(f"student: {sum(q.numel() for q in params)} trained parameters, sum(w_q) {checksum:.9e}")
    seconds, cpu_seconds = [], []  # wall time counts; process CPU time is less load-sensitive
    for i in range(a.warmup + a.steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        loss = step()
        cpu = time.process_time() - cpu_start
        took = time.perf_counter() - start
        if i == 0:
            first_loss = loss
        if i >= a.warmup:
            seconds.append(took)
            cpu_seconds.append(cpu)
    median, cpu_median = statistics.median(seconds), statistics.median(cpu_seconds)
    tokens_per_s = a.batch * a.seq / median
    print(f"torch qat-kd step: hidden {a.hidden} x {a.layers} layers, {a.heads} heads / "
          f"{a.kv_heads} kv, mlp {a.intermediate}, vocab {a.vocab}, batch {a.batch} x {a.seq}, "
          f"W{a.bits} g{a.group_size}, {a.device}, {a.threads} thread(s): median {median:.4f} s "
          f"(min {min(seconds):.4f}, CPU {cpu_median:.4f} s) over {len(seconds)} steps = "
          f"{tokens_per_s:.0f} tokens/s")
    print(f"RESULT tokens_per_s={tokens_per_s:.3f} seconds={median:.6f} "
          f"cpu_seconds={cpu_median:.6f} first_loss={first_loss:.12e} last_loss={loss:.12e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
