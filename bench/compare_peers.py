#!/usr/bin/env python3
"""Times PyTorch's attention kernels on the shapes of a `flashjit bench --json` file
and prints flashjit's throughput as a ratio to each peer.

Run on the GPU machine, in the same call as `flashjit bench`, so both measurements come
from one machine in one session:

    flashjit bench --json $OUT/flashjit.json && python3 bench/compare_peers.py $OUT/flashjit.json

Timing: CUDA events around each call, median of 50 after 10 warm-ups; inputs rotated over
enough sets to exceed twice the L2, so no kernel reads the previous call's data from
cache. FLOPs as in the FlashAttention papers: 4*B*H*N^2*d, halved when causal.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PEERS = {"fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def median_ms(fn, iters=50, warm=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def main(path):
    data = json.load(open(path))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"device: {torch.cuda.get_device_name(0)} (flashjit measured on {data['device']})")
    header = f"{'dtype':5} {'d':>4} {'N':>6} {'causal':6} {'flashjit':>9} {'fa2':>7} {'cudnn':>7} {'x fa2':>6} {'x cudnn':>7}"
    print(header)
    ratios = {name: [] for name in PEERS}
    rows = []
    for row in data["rows"]:
        dtype = torch.bfloat16 if row["dtype"] == "bf16" else torch.float16
        B, H, N, d, causal = row["B"], row["H"], row["N"], row["d"], row["causal"]
        elems = B * H * N * d
        sets = max(1, math.ceil(2 * l2 / (4 * elems * 2)))
        inputs = [[torch.randn(B, H, N, d, device="cuda", dtype=dtype) for _ in range(3)]
                  for _ in range(sets)]
        flops = 4 * B * H * N * N * d / (2 if causal else 1)
        result = dict(row)
        for name, backend in PEERS.items():
            counter = [0]

            def call():
                q, k, v = inputs[counter[0] % sets]
                counter[0] += 1
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            try:
                with sdpa_kernel(backend):
                    ms = median_ms(call)
                result[name] = flops / ms / 1e9
                ratios[name].append(row["tflops"] / result[name])
            except Exception as ex:  # a backend that does not support the shape
                result[name] = None
                print(f"  {name} unavailable for {row['dtype']} d{d} N{N}: {str(ex)[:80]}")
        del inputs
        rows.append(result)
        fa2, cudnn = result.get("fa2"), result.get("cudnn")
        print(f"{row['dtype']:5} {d:>4} {N:>6} {str(causal):6} {row['tflops']:9.1f} "
              f"{fa2 or 0:7.1f} {cudnn or 0:7.1f} {row['tflops'] / fa2 if fa2 else 0:6.2f} "
              f"{row['tflops'] / cudnn if cudnn else 0:7.2f}", flush=True)
    for name, values in ratios.items():
        if values:
            geo = math.exp(sum(math.log(v) for v in values) / len(values))
            print(f"geometric mean flashjit / {name}: {geo:.3f} over {len(values)} shapes, "
                  f"min {min(values):.3f}")
    json.dump(rows, open(path.replace(".json", "-peers.json"), "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
