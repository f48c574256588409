#!/usr/bin/env python3
"""The backward pass of flashjit and of SDPA's cuDNN backend under sustained load, with the
GPU's clock and power sampled beside them: what a training job's attention runs at once
the GPU sits at its power cap (docs/PERF.md bw17).

    FLASHJIT_LIBRARY=.gpu/libflashjit.so python3 bench/steady_state_probe.py --seqlen 4096

bf16, batch * N = 16384 tokens, heads * head_dim = 2048, non-causal. Each backend runs
--seconds of back-to-back backward calls (torch.autograd.grad of a retained graph, inputs
rotated over 4 sets), twice, in the order A B B A; each phase prints its median time a
call (CUDA events over 8 calls) and the median SM clock and power nvidia-smi reported
during it, with the active throttle reasons (0x4: the software power cap).
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import flashjit  # noqa: E402


def graphs(make_out, layout, b, n, h, d):
    """Four (output, inputs, dout) graphs whose backward can be run again and again."""
    shape = (b, n, h, d) if layout == "bshd" else (b, h, n, d)
    out = []
    for _ in range(4):
        ins = [torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3)]
        out.append((make_out(*ins), ins, torch.randn(shape, device="cuda", dtype=torch.bfloat16)))
    return out


def run(gs, seconds):
    """Median ms a backward call over `seconds` of back-to-back calls."""
    times, i, end = [], 0, time.time() + seconds
    while time.time() < end:
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(8):
            o, ins, do = gs[i % len(gs)]
            i += 1
            torch.autograd.grad(o, ins, do, retain_graph=True)
        e.record()
        e.synchronize()
        times.append(a.elapsed_time(e) / 8)
    return statistics.median(times)


def samples(path):
    """(epoch seconds, SM MHz, watts, throttle reasons) of nvidia-smi's CSV lines."""
    out = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, float(f[1].split()[0]), float(f[2].split()[0]), f[3]))
        except (ValueError, IndexError):
            continue
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=6)
    a = ap.parse_args()
    n, d = a.seqlen, a.head_dim
    b, h = max(1, 16384 // n), 2048 // d
    flops = 2.5 * 4 * b * h * n * n * d
    backends = {"flashjit": graphs(flashjit.attention, "bshd", b, n, h, d)}
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        backends["cudnn"] = graphs(F.scaled_dot_product_attention, "bhsd", b, n, h, d)
    for gs in backends.values():
        run(gs, 1)
    log = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,"
                            "clocks_throttle_reasons.active", "--format=csv,noheader",
                            "-lms", "200"], stdout=open(log, "w"))
    phases = []
    try:
        for name in ("flashjit", "cudnn", "cudnn", "flashjit"):
            t0 = time.time()
            ms = run(backends[name], a.seconds)
            phases.append((name, t0, time.time(), ms))
            time.sleep(2)
    finally:
        smi.terminate()
        smi.wait()
    got = samples(log)
    os.unlink(log)
    print(f"{torch.cuda.get_device_name(0)}; bf16 d {d} N {n} B {b} H {h}, backward, "
          f"{a.seconds:g} s a phase")
    for name, t0, t1, ms in phases:
        # The phase's middle, past the clock's first fall and before its end.
        s = [x for x in got if t0 + 1 <= x[0] <= t1 - 0.5]
        clock = f"{statistics.median(x[1] for x in s):.0f} MHz" if s else "-"
        power = f"{statistics.median(x[2] for x in s):.0f} W" if s else "-"
        reasons = s[len(s) // 2][3] if s else "-"
        print(f"{name:9} {ms * 1000:8.1f} us {flops / ms / 1e9:7.1f} TF/s  SM clock {clock}, "
              f"power {power}, throttle reasons {reasons}, {len(s)} samples")


if __name__ == "__main__":
    main()
