#!/usr/bin/env python3
"""A/B of two builds from `flashjit bench --json` runs taken in interleaved rounds.

A change to a template is judged against the build before it, in one call on one
machine: keep the old CLI (e.g. .gpu/flashjit.base), then run both in alternating order
(A B B A A B), each with the same `bench` arguments and its own --json file:

    for b in base new new base base new; do
      .gpu/flashjit.$b bench ... --json out/run_${b}_$((i += 1)).json
    done
    python3 bench/ab_compare.py --a 'out/run_base_*.json' --b 'out/run_new_*.json'

Per shape (dtype, head dim, N, causal) it prints, for the tile fastest in A's medians,
each build's per-round TFLOP/s, B's median over A's median on that same tile, and the
ratio of the two builds' best tiles. One reading of a shape drifts by several percent
with the GPU's clocks (docs/PERF.md bw7), so a ratio counts only where the rounds of the
two builds do not overlap; a shape whose kernels did not change (a control) shows the
spread. Needs the standard library only: it runs here as well as on the GPU machine.
"""
import argparse
import glob
import json
import statistics
import sys


def load_runs(pattern):
    """One dict per file matching `pattern` (sorted): shape key -> bench row."""
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit(f"ab_compare: no file matches {pattern!r}")
    runs = []
    for path in files:
        with open(path) as f:
            rows = json.load(f)["rows"]
        runs.append({(r["dtype"], r["d"], r["N"], r["causal"]): r for r in rows})
    return runs


def tile_rates(runs, key, tile, wrong_ok=False):
    """The tile's TFLOP/s in each run that timed it (wrong outputs left out unless
    wrong_ok: a probe build that drops part of the work, bench --time-wrong-output)."""
    rates = []
    for run in runs:
        entry = run.get(key, {}).get("tiles", {}).get(tile, {})
        if entry.get("tflops") and (wrong_ok or not entry.get("wrong_output")):
            rates.append(entry["tflops"])
    return rates


def compare(a_runs, b_runs, b_wrong_ok=False):
    """Rows of (key, tile, a_rates, b_rates, same_tile_ratio, best_ratio, separated)."""
    out = []
    for key in sorted(set(a_runs[0]) & set(b_runs[0])):
        tiles = a_runs[0][key]["tiles"]
        scored = [(statistics.median(tile_rates(a_runs, key, t)), t) for t in tiles
                  if tile_rates(a_runs, key, t) and tile_rates(b_runs, key, t, b_wrong_ok)]
        if not scored:
            continue
        _, tile = max(scored)
        a, b = tile_rates(a_runs, key, tile), tile_rates(b_runs, key, tile, b_wrong_ok)
        same = statistics.median(b) / statistics.median(a)
        if b_wrong_ok:  # the rows' best leaves wrong tiles out: take the tiles' medians
            best = max(statistics.median(tile_rates(b_runs, key, t, True)) for t in tiles
                       if tile_rates(b_runs, key, t, True)) / max(scored)[0]
        else:
            best = statistics.median([r[key]["tflops"] for r in b_runs if key in r]) / \
                statistics.median([r[key]["tflops"] for r in a_runs if key in r])
        separated = min(b) > max(a) or max(b) < min(a)
        out.append((key, tile, a, b, same, best, separated))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="glob of build A's --json files (the base)")
    parser.add_argument("--b", required=True, help="glob of build B's --json files")
    parser.add_argument("--b-wrong-ok", action="store_true",
                        help="count B's tiles whose output failed the check: B is a probe "
                             "that drops part of the work (bench --time-wrong-output)")
    args = parser.parse_args(argv)
    a_runs, b_runs = load_runs(args.a), load_runs(args.b)
    rows = compare(a_runs, b_runs, args.b_wrong_ok)
    if not rows:
        sys.exit("ab_compare: the two sets share no shape with a tile timed in both")
    print(f"A: {len(a_runs)} runs ({args.a}), B: {len(b_runs)} runs ({args.b})")
    print("dtype d N causal | tile (A's fastest) | A TF/s (rounds) | B TF/s (rounds) | "
          "B/A same tile | B/A best tiles")
    for (dtype, d, n, causal), tile, a, b, same, best, separated in rows:
        mark = "" if separated else " (rounds overlap)"
        print(f"{dtype} {d} {n} {'causal' if causal else 'full'} | {tile} | "
              f"{statistics.median(a):.0f} ({' '.join(f'{x:.0f}' for x in a)}) | "
              f"{statistics.median(b):.0f} ({' '.join(f'{x:.0f}' for x in b)}) | "
              f"{same:.3f}{mark} | {best:.3f}")
    print(f"geometric mean, same tile: {statistics.geometric_mean([r[4] for r in rows]):.3f}; "
          f"best tiles: {statistics.geometric_mean([r[5] for r in rows]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
