#!/usr/bin/env python3
"""A GPT-2-small transformer block (d_model 768, 12 heads of 64, MLP 3072, pre-LayerNorm,
causal self-attention), forward and backward, with flashjit.attention and with PyTorch's
scaled_dot_product_attention: both times and the largest differences of the outputs
and of the parameters' gradients.

    FLASHJIT_LIBRARY=.gpu/libflashjit.so python3 examples/gpt2_block.py

(needs a library with the backward pass, fj_backward: flashjit 0.2 or later)
"""
import copy
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashjit  # noqa: E402


class Block(nn.Module):
    def __init__(self, d_model=768, heads=12, mlp=3072, use_flashjit=True):
        super().__init__()
        self.heads, self.use_flashjit = heads, use_flashjit
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.fc, self.out = nn.Linear(d_model, mlp), nn.Linear(mlp, d_model)

    def attend(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).unbind(2)  # BSHD views
        if self.use_flashjit:
            y = flashjit.attention(q, k, v, causal=True)
        else:
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True).transpose(1, 2)
        return self.proj(y.reshape(b, n, c))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def step(block, x, dy):
    block.zero_grad(set_to_none=True)
    x.grad = None
    y = block(x)
    y.backward(dy)
    return y


def timed_ms(block, x, dy, iters=30):
    for _ in range(5):
        step(block, x, dy)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        step(block, x, dy)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    if not flashjit.has_backward():
        sys.exit(f"{flashjit.library_path()} has no fj_backward: this example trains")
    torch.manual_seed(0)
    flashjit.configure(tune_mode="heuristic")
    batch, seq = 8, 1024
    ours = Block(use_flashjit=True).cuda().to(torch.bfloat16)
    theirs = copy.deepcopy(ours)
    theirs.use_flashjit = False
    x = torch.randn(batch, seq, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    y1 = step(ours, x, dy)
    dx1 = x.grad.clone()
    y2 = step(theirs, x, dy)
    dx2 = x.grad.clone()
    out_diff = (y1.float() - y2.float()).abs().max().item()
    dx_diff = (dx1.float() - dx2.float()).abs().max().item()
    grad_abs = max((a.grad.float() - b.grad.float()).abs().max().item()
                   for a, b in zip(ours.parameters(), theirs.parameters()))
    # Per parameter, relative to that gradient's largest entry (they sum over 8192 tokens
    # in bf16, so absolute differences scale with the gradient).
    grad_diff = max(((a.grad.float() - b.grad.float()).abs().max() /
                     b.grad.float().abs().max().clamp_min(1e-12)).item()
                    for a, b in zip(ours.parameters(), theirs.parameters()))
    t1, t2 = timed_ms(ours, x, dy), timed_ms(theirs, x, dy)
    print(f"GPT-2 block, bf16, batch {batch} x {seq} tokens, forward + backward:")
    print(f"  flashjit.attention: {t1:.3f} ms/step")
    print(f"  PyTorch SDPA:       {t2:.3f} ms/step")
    print(f"  max |output difference| {out_diff:.3e} (outputs up to "
          f"{y2.float().abs().max().item():.1f}); max parameter-gradient difference "
          f"{grad_diff:.2%} of that gradient's largest entry ({grad_abs:.3e} absolute); "
          f"max |input-gradient difference| {dx_diff:.3e} (values up to "
          f"{dx2.float().abs().max().item():.2f})")


if __name__ == "__main__":
    main()
