"""bench/ab_compare.py on made-up `flashjit bench --json` runs: the same tile's ratio, the
overlap mark, the best tiles' ratio, and wrong outputs left out unless --b-wrong-ok."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import ab_compare  # noqa: E402


def bench_run(tiles, wrong=()):
    """One bench --json file's content: one shape, `tiles` = {tile: TFLOP/s}."""
    per_tile = {t: {"tflops": r, "wrong_output": t in wrong} for t, r in tiles.items()}
    right = [r for t, r in tiles.items() if t not in wrong]
    return {"rows": [{"dtype": "bf16", "d": 128, "N": 4096, "causal": True,
                      "tflops": max(right) if right else 0.0, "tiles": per_tile}]}


class AbCompare(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, content):
        with open(os.path.join(self.dir.name, name), "w") as f:
            json.dump(content, f)

    def main(self, *extra):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ab_compare.main(["--a", os.path.join(self.dir.name, "a_*.json"),
                             "--b", os.path.join(self.dir.name, "b_*.json"), *extra])
        return out.getvalue()

    def test_same_tile_ratio_and_separated_rounds(self):
        for i, rate in enumerate([100, 102, 101]):
            self.write(f"a_{i}.json", bench_run({"t1": rate, "t2": 90}))
        for i, rate in enumerate([110, 111, 109]):
            self.write(f"b_{i}.json", bench_run({"t1": rate, "t2": 95}))
        out = self.main()
        self.assertIn("| t1 | 101 (100 102 101) | 110 (110 111 109) | 1.089 | 1.089", out)
        self.assertNotIn("rounds overlap", out)

    def test_overlapping_rounds_are_marked(self):
        for i, rate in enumerate([100, 110]):
            self.write(f"a_{i}.json", bench_run({"t1": rate}))
        for i, rate in enumerate([105, 108]):
            self.write(f"b_{i}.json", bench_run({"t1": rate}))
        self.assertIn("(rounds overlap)", self.main())

    def test_wrong_outputs_count_only_when_asked(self):
        self.write("a_0.json", bench_run({"t1": 100, "t2": 90}))
        self.write("b_0.json", bench_run({"t1": 120, "t2": 99}, wrong={"t1", "t2"}))
        with self.assertRaises(SystemExit):  # nothing timed right in B: nothing to compare
            self.main()
        out = self.main("--b-wrong-ok")
        self.assertIn("| t1 | 100 (100) | 120 (120) | 1.200 | 1.200", out)


if __name__ == "__main__":
    unittest.main()
