#!/usr/bin/env python3
"""The Python call path's overhead (issue 26): flashjit.attention on a tiny shape (B=1,
H=1, N=128, d=64, bf16; the kernel takes a few microseconds, so the host path is what
is measured) against the same fj_forward called through ctypes with its arguments built
once, the nearest Python gets to calling the C API:

    FLASHJIT_LIBRARY=.gpu/libflashjit.so python3 bench/python_overhead.py [--rounds 21]

Per call: host wall time (time.perf_counter over a round of calls, then a synchronize
outside the timing) and CUDA-event time (events around the same round: what the GPU
saw, i.e. launches per second when the host is the bottleneck). Medians of the rounds,
the paths measured in alternating rounds so that drift affects them alike. Target:
flashjit.attention's host time <= 1.2 x the direct call's + 10 us; exit status 1 when
missed."""
import argparse
import ctypes as C
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashjit  # noqa: E402
from flashjit import _capi, _runtime  # noqa: E402


def one_round(fn, n):
    """(host us per call, CUDA-event us per call) over n calls."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e6
    end.record()
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) * 1e3 / n


def median(xs):
    return sorted(xs)[len(xs) // 2]


def interleaved(paths, rounds, n):
    """{name: (host median, event median)}, the paths taking turns round by round."""
    for fn in paths.values():  # warm-up
        for _ in range(500):
            fn()
    times = {name: ([], []) for name in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            host, event = one_round(fn, n)
            times[name][0].append(host)
            times[name][1].append(event)
    return {name: (median(h), median(e)) for name, (h, e) in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=2000, help="calls per round")
    opts = parser.parse_args()

    flashjit.configure(tune_mode="heuristic", cache_path="")
    q, k, v = (torch.randn(1, 128, 1, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with torch.no_grad():
        o = flashjit.attention(q, k, v)  # gets the kernel (the plan's), then only launches
    device = torch.cuda.current_device()
    # The handle flashjit.attention uses (same description: one handle per device).
    handle, info = _runtime.kernel(device, "bf16", 64, 64, 1, 1, False, 0.0, False,
                                   (128, 128, 1))
    args = _capi.new(_capi.ForwardArgs, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                     o=o.data_ptr(), batch=1, seqlen_q=128, seqlen_k=128)
    for name, t in zip("qkvo", (q, k, v, o)):
        setattr(args, f"{name}_batch_stride", t.stride(0))
        setattr(args, f"{name}_seq_stride", t.stride(1))
        setattr(args, f"{name}_head_stride", t.stride(2))
    stream = C.c_void_p(torch.cuda.current_stream().cuda_stream)
    lib = _capi.library()
    ref = C.byref(args)
    cdll = lib.lib.fj_forward  # ctypes.CDLL: releases the GIL around the call
    pydll = C.PyDLL(lib.path).fj_forward  # keeps it, as flashjit's fast path does
    pydll.argtypes, pydll.restype = cdll.argtypes, C.c_int
    assert cdll(handle, ref, stream) == 0, lib.lib.fj_last_error_message()
    with torch.no_grad():
        t = interleaved({"direct": lambda: cdll(handle, ref, stream),
                         "direct_gil": lambda: pydll(handle, ref, stream),
                         "flashjit": lambda: flashjit.attention(q, k, v)},
                        opts.rounds, opts.calls)
    direct, python = t["direct"][0], t["flashjit"][0]
    limit = 1.2 * direct + 10
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, flashjit "
          f"{flashjit.version()}, kernel {info.family.decode()} "
          f"bm{info.block_m}.bn{info.block_n}.w{info.warps}.s{info.stages}")
    print(f"B=1 H=1 N=128 d=64 bf16; medians of {opts.rounds} rounds of {opts.calls} calls")
    print(f"{'path':44s} {'host us/call':>12s} {'event us/call':>14s}")
    for name, label in (("direct", "fj_forward via ctypes.CDLL, prebuilt args"),
                        ("direct_gil", "fj_forward via ctypes.PyDLL, prebuilt args"),
                        ("flashjit", "flashjit.attention (no grad)")):
        print(f"{label:44s} {t[name][0]:12.2f} {t[name][1]:14.2f}")
    print(f"ratio {python / direct:.2f} (host); target <= 1.2 x direct + 10 us = {limit:.2f} us: "
          f"{'met' if python <= limit else 'NOT met'}")
    return 0 if python <= limit else 1


if __name__ == "__main__":
    sys.exit(main())
