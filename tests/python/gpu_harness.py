"""What the GPU test scripts of this folder share (gpu_test_torch.py, gpu_test_fp8.py,
gpu_test_fp8_cache.py): torch, or a clean skip where it is not installed; the package of
this checkout on the path; one set of counts, so that a script that runs another's cases
(gpu_test_torch.py runs both FP8 scripts') counts them with its own; the decorator that
runs a case, prints it and counts it; the skip lines; and the references two scripts
check against (the causal mask, the error measure, the decode reference)."""
import math
import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

results = {"passed": 0, "failed": 0, "skipped": 0}


def import_torch(as_script):
    """torch; run as a script without it, the skip line and exit 0 (nothing to test)."""
    try:
        import torch
        return torch
    except ImportError:
        if as_script:
            print("SKIP  every case: torch is not installed (run on the GPU machine, "
                  "docs/GPU-TESTING.md)")
            print("0 passed, 0 failed, 1 skipped")
            sys.exit(0)
        raise


class Skip(Exception):
    pass


def case(name):
    """Runs the decorated function as one case, labelled by name and its arguments."""
    def wrap(fn):
        def run(*args, **kwargs):
            shown = [str(a).replace("torch.", "") for a in args] + [
                f"{key}={str(value).replace('torch.', '')}" for key, value in kwargs.items()
                if not callable(value) and not hasattr(value, "shape")]
            label = name + (" " + " ".join(shown) if shown else "")
            try:
                fn(*args, **kwargs)
                results["passed"] += 1
                print(f"ok    {label}", flush=True)
            except Skip as why:
                results["skipped"] += 1
                print(f"SKIP  {label}: {why}", flush=True)
            except Exception:
                results["failed"] += 1
                print(f"FAIL  {label}\n{traceback.format_exc()}", flush=True)
        return run
    return wrap


def skip_cases(what, why):
    """A group of cases that cannot run here, counted as one skip."""
    results["skipped"] += 1
    print(f"SKIP  {what}: {why}", flush=True)


def no_device(torch):
    """main()'s guard: without a CUDA device, the skip line and the counts; True then."""
    if torch.cuda.is_available():
        return False
    print("SKIP  every case: no CUDA device (run on the GPU machine, docs/GPU-TESTING.md)")
    print("0 passed, 0 failed, 1 skipped")
    return True


def causal_mask(nq, nk, device="cuda"):
    """Bottom-right aligned: query i sees keys j <= i + nk - nq (True = attend)."""
    import torch
    i = torch.arange(nq, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    return j <= i + nk - nq


def max_err(a, b):
    """The largest absolute difference, a's NaNs (rows that see no key) taken as 0."""
    return (a.float().nan_to_num(0.0) - b.float()).abs().max().item()


def decode_reference(q, k, v, causal, scale=None, dtype=None, window=None, softcap=0.0,
                     alibi=None, bias=None, keep=None):
    """(o, lse) of one sequence computed in `dtype` (fp32 by default): q [1, sq, hq, d],
    k / v [1, n, hk, d]; causal bottom-right (query i sees keys j <= i + n - sq); rows
    that see no key: 0, -inf. window (left, right) bottom-right too (query i sees keys
    i + n - sq - left .. i + n - sq + right, -1 unbounded); softcap: scaled scores become
    softcap * tanh(score / softcap); alibi: the sequence's slopes [hq], the bias
    -slope * |i + n - sq - j| after the cap; bias [hq, sq, n] added after them (a
    score_mod's); keep [hq, sq, n] bool, False drops the key (a mask_mod's)."""
    import torch
    dtype = dtype or torch.float32
    hq, hk = q.shape[2], k.shape[2]
    qf, kf, vf = (t.to(dtype).transpose(1, 2) for t in (q, k, v))
    if hq != hk:
        kf, vf = (t.repeat_interleave(hq // hk, dim=1) for t in (kf, vf))
    s = (qf @ kf.transpose(-1, -2)) * (scale or 1 / math.sqrt(q.shape[-1]))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if alibi is not None:
        nq, nk = q.shape[1], k.shape[1]
        dist = (torch.arange(nq, device=q.device)[:, None] + nk - nq -
                torch.arange(nk, device=q.device)[None, :]).abs().to(s.dtype)
        s = s - alibi.to(s.dtype)[None, :, None, None] * dist
    if bias is not None:
        s = s + bias.to(s.dtype)[None]
    if keep is not None:
        s = s.masked_fill(~keep[None], float("-inf"))
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[1], k.shape[1], q.device), float("-inf"))
    if window is not None:
        nq, nk = q.shape[1], k.shape[1]
        i = torch.arange(nq, device=q.device)[:, None] + nk - nq
        j = torch.arange(nk, device=q.device)[None, :]
        keep = torch.ones(nq, nk, dtype=torch.bool, device=q.device)
        if window[0] >= 0:
            keep &= j >= i - window[0]
        if window[1] >= 0:
            keep &= j <= i + window[1]
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (p @ vf).transpose(1, 2), lse


def report():
    """The counts line; the exit status (1 on any failure)."""
    print(f"{results['passed']} passed, {results['failed']} failed, "
          f"{results['skipped']} skipped")
    return 1 if results["failed"] else 0
