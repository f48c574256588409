"""What the GPU test scripts of this folder share (gpu_test_torch.py, gpu_test_fp8.py,
gpu_test_fp8_cache.py): torch, or a clean skip where it is not installed; the package of
this checkout on the path; one set of counts, so that a script that runs another's cases
(gpu_test_torch.py runs both FP8 scripts') counts them with its own; and the decorator
that runs a case, prints it and counts it."""
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


def report():
    """The counts line; the exit status (1 on any failure)."""
    print(f"{results['passed']} passed, {results['failed']} failed, "
          f"{results['skipped']} skipped")
    return 1 if results["failed"] else 0
