"""Micro benchmark: typing Ansor steps, vectorised (``fast_steps.steps_from_json``) vs the pure-Python reference vs
bare ``orjson.loads``, on the same real log lines.

    python3 benchmarks/steps_micro.py [--source roller-k80] [--limit 40000] [--batch 20000] [--repeat 5]

Each variant runs over the same records in batches of ``--batch`` (the converter's batch size); the best of
``--repeat`` runs (process CPU time, so other load on a shared machine counts less) is reported as records/s,
steps/s and microseconds per record.

- ``fast``      steps_from_json(batch of compact step texts)
- ``reference`` readers.steps_from_json_reference (orjson.loads of each step text + the Python typing loop)
- ``loads-steps`` orjson.loads of each compact step text only (no typing at all)
- ``loads-line``  orjson.loads of each whole log line (what the converter parses anyway)
"""
from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tenset_curate import fast_steps, readers  # noqa: E402

REAL = Path("/work/shared/realdata/ansor")


def load(source: str, limit: int) -> tuple[list[bytes], list[bytes]]:
    lines, blobs = [], []
    for path in sorted((REAL / source).rglob("*.json*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            for line in f:
                s = line.strip()
                if not s or s[:1] == b"#":
                    continue
                try:
                    steps = orjson.loads(s)["i"][1][1]
                except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
                    continue
                lines.append(s)
                blobs.append(orjson.dumps(steps))
                if len(blobs) >= limit:
                    return lines, blobs
    return lines, blobs


def _reference(blobs):
    ref = getattr(readers, "steps_from_json_reference", None)
    if ref is not None:
        return ref(blobs)
    # fallback when readers has no bulk reference: the per-record Python loop
    cols = readers._Columns()
    for b in blobs:
        cols.add_ansor_steps(orjson.loads(b))
    return None


def bench(fn, batches, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for b in batches:
            fn(b)
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="roller-k80")
    ap.add_argument("--limit", type=int, default=40_000)
    ap.add_argument("--batch", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ref-repeat", type=int, default=2)
    a = ap.parse_args()

    lines, blobs = load(a.source, a.limit)
    n = len(blobs)
    steps = sum(len(orjson.loads(b)) for b in blobs)
    nbytes = sum(map(len, blobs))
    print(f"{a.source}: {n} records, {steps} steps ({steps / n:.1f}/record), {nbytes / n:.0f} JSON bytes/record")
    bb = [blobs[i:i + a.batch] for i in range(0, n, a.batch)]
    lb = [lines[i:i + a.batch] for i in range(0, n, a.batch)]

    fast, bad = fast_steps.steps_from_json(bb[0])
    ref = readers.steps_from_json_reference(bb[0]) if hasattr(readers, "steps_from_json_reference") else None
    if ref is not None:
        assert fast.equals(ref[0]) and bad == ref[1], "fast and reference differ"
        print("check: fast == reference on the first batch")

    loads = orjson.loads

    def loads_all(texts):  # parse and drop, as a converter does (keeping 20k parsed records alive costs GC time)
        for x in texts:
            loads(x)

    rows = [
        ("fast", lambda b: fast_steps.steps_from_json(b), bb, a.repeat),
        ("reference", _reference, bb, a.ref_repeat),
        ("loads-steps", loads_all, bb, a.repeat),
        ("loads-line", loads_all, lb, a.repeat),
    ]
    print(f"{'variant':12s} {'records/s':>12s} {'steps/s':>12s} {'us/record':>10s} {'us/step':>8s}")
    res = {}
    for name, fn, batches, rep in rows:
        t = bench(fn, batches, rep)
        res[name] = t
        print(f"{name:12s} {n / t:12,.0f} {steps / t:12,.0f} {t / n * 1e6:10.2f} {t / steps * 1e6:8.3f}")
    print(f"fast is {res['reference'] / res['fast']:.1f}x the reference, "
          f"{res['loads-steps'] / res['fast']:.1f}x orjson.loads of the step texts")


if __name__ == "__main__":
    main()
