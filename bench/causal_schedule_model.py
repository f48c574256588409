#!/usr/bin/env python3
"""A model of fwd_wgmma's causal work schedule on the persistent grid, for predictions
(docs/PERF.md v5.6) and for checking the walk's arithmetic off the GPU.

    python3 bench/causal_schedule_model.py            # coverage check + predicted gains
    python3 bench/causal_schedule_model.py --sms 114  # another GPU's SM count

It replays, for every CTA, the order in which templates/fwd_wgmma.cuh's TileWalk hands
out causal query blocks: pairs (M-1-i, i) round-robin over the CTAs, and the last round's
pairs split into single blocks, largest first (CTA c takes the c-th largest, then the
(2g-1-c)-th). It mirrors the device code line for line. Change one, change the other.

The cost model: a block of k key tiles costs k + FIXED (a work tile's fixed cost in key
tiles, ~2.4 from v5.2's profile), every CTA runs at the same speed, and the launch takes
as long as the busiest CTA.
"""
import argparse
import itertools

DONE = 2**31 - 1
FIXED = 2.4


def tail_item(m_blocks, per_head, k, paired, units):
    """TileWalk::tail_item: (bh, m_block) of the k-th largest block of the last round."""
    tail = units - paired
    h0, i0 = divmod(paired, per_head)
    whole = units // per_head - 1 - h0
    lights = m_blocks // 2
    first = (whole + 1) * max(lights - i0, 0)
    if tail <= 0 or k >= tail + first + whole * min(i0, lights):
        return None
    if k < tail:
        if k < whole * i0:
            i, r = divmod(k, whole)
            return h0 + 1 + r, m_blocks - 1 - i
        r, rem = divmod(k - whole * i0, whole + 1)
        return h0 + rem, m_blocks - 1 - (i0 + r)
    k -= tail
    if k < first:
        r, rem = divmod(k, whole + 1)
        return h0 + rem, lights - 1 - r
    r, rem = divmod(k - first, whole)
    return h0 + 1 + rem, min(i0, lights) - 1 - r


def walk(m_blocks, bh_count, grid, cta, split_last_round=True):
    """The (bh, m_block) sequence CTA `cta` of `grid` takes (TileWalk::next, causal)."""
    per_head = (m_blocks + 1) // 2
    units = per_head * bh_count
    unit, second_half, out = cta, False, []
    while unit != DONE:
        in_pairs = unit - cta + grid <= units if split_last_round else unit < units
        if in_pairs:
            bh, i = divmod(unit, per_head)
            m_block = i if second_half else m_blocks - 1 - i
            second_half = not second_half and m_block != i
            if not second_half:
                unit += grid
        else:
            k = 2 * grid - 1 - cta if second_half else cta
            paired = unit - k
            item = tail_item(m_blocks, per_head, k, paired, units)
            if item is None:
                break
            bh, m_block = item
            unit = DONE if second_half else paired + 2 * grid - 1 - cta
            second_half = True
        out.append((bh, m_block))
    return out


def makespan(m_blocks, bh_count, sms, split_last_round=True):
    grid = min(m_blocks * bh_count, sms)
    return max(sum(m + 1 + FIXED for _, m in walk(m_blocks, bh_count, grid, c, split_last_round))
               for c in range(grid))


def check_coverage(sms_values=(132, 114, 16, 7, 3, 1)):
    """Every block of every head exactly once, whatever the grid."""
    for m_blocks, bh_count, sms in itertools.product(range(1, 22), range(1, 45), sms_values):
        grid = min(m_blocks * bh_count, sms)
        seen = sorted(x for c in range(grid) for x in walk(m_blocks, bh_count, grid, c))
        want = [(b, m) for b in range(bh_count) for m in range(m_blocks)]
        if seen != want:
            raise SystemExit(f"walk misses or repeats a block: M={m_blocks} BH={bh_count} "
                             f"grid={grid}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    check_coverage()
    print("coverage: every block once, grids of 1..132 CTAs, M 1..21, BH 1..44")
    print(f"predicted gain of the last round in single blocks, {args.sms} SMs "
          f"(peers' shapes: batch*N = 16384, heads*d = 2048, 128-row blocks):")
    for d in (64, 128, 256):
        for n in (512, 1024, 2048, 4096, 8192, 16384):
            m_blocks, bh_count = n // 128, (16384 // n) * (2048 // d)
            old = makespan(m_blocks, bh_count, args.sms, split_last_round=False)
            new = makespan(m_blocks, bh_count, args.sms)
            print(f"  d{d:<3} N={n:<5} {old / new:.3f}")


if __name__ == "__main__":
    main()
