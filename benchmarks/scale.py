"""Scale benchmark: convert and prune on 1x, 4x and 16x copies of the real Ansor logs, local and Ray, 1 and 2 workers.

    python benchmarks/scale.py [--logs ../shared/realdata/ansor] [--scales 1 4 16] [--scale-configs local:1 ray:2] \
        [--configs local:1 local:2 ray:1 ray:2] [--config-scales 4] \
        [--prune-runs random:1:1 random:4:1 random:16:1 random:4:2 hybrid:1:1 hybrid:4:1] [--prune-only]

``--scale-configs`` run at every scale (time and memory against input size); ``--configs`` at ``--config-scales``
(1 against 2 workers, local against Ray). ``--prune-runs`` (method:scale:workers, local processes) prune the local:1
output of that scale; prune streams units of whole tasks (``prune.plan_units``), so its memory is that of one unit
per worker whatever the scale.

Copies. Copy 0 is the real logs byte for byte; copy c >= 1 rewrites, in every record, the name at the head of the
workload key (the first string of ``"i"``): a TenSet-style md5 becomes ``md5(name + "/copy<c>")`` (still 32 hex
digits), a registered name (``conv2d_layer``, ``matmul``...) gets ``__copy<c>`` appended (operator classes still
match it). Arguments, target, steps and costs are untouched, so a copy is the same work with its own task ids
(task_id = hash(workload key, target kind)); the number of distinct tasks at Nx is checked to be N times that of 1x.
Every copy is laid out as TenSet's ``<copy>/measure_records/<hardware>/...`` (hardware = the realdata folder name) and
gzipped (level 1); Nx converts copies 0..N-1 (one input folder per copy, so labels stay distinct).

Each configuration runs in a fresh subprocess (``--one``). Peak memory: this script polls that subprocess and all
its descendants (psutil, every 50 ms): for each process the last VmHWM (its own peak RSS, from /proc/PID/status)
and, per poll, the sum of the current RSS of the whole tree. Ray's processes (gcs_server, raylet, its agents and
the ``ray::`` workers) are started by the driver of a local Ray instance, so they are in that tree.
``peak_tree_mb`` is the largest sum seen (lower bound of the true peak: a spike between polls is missed);
``driver_hwm_mb`` the driver's own VmHWM; ``worker_hwm_mb`` the largest VmHWM of a worker process. Times: the
convert call itself (Ray's start-up, ``ray_init_s``, is reported apart); ratios come from this one run, so machine
load (reported, ``os.getloadavg``) hits all configurations alike only roughly: the machine is shared.

Writes reports/scale.md and reports/scale.json.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TENSET_RECORDS = 52_000_000  # TenSet's full dataset (measure records, all hardware)
HEAD = re.compile(rb'^(\{"i": \[\["\[\\")([^"\\]*)(\\")')
MD5 = re.compile(rb"^[0-9a-f]{32}$")


# ----------------------------------------------------------------------------------------------------------------
# copies

def rewrite_line(line: bytes, c: int) -> tuple[bytes, bool]:
    m = HEAD.match(line)
    if not m:
        return line, False
    name = m.group(2)
    new = (hashlib.md5(name + b"/copy%d" % c).hexdigest().encode() if MD5.match(name) else name + b"__copy%d" % c)
    return m.group(1) + new + m.group(3) + line[m.end():], True


def make_copy(src: Path, dst: Path, c: int) -> dict:
    """Copy c of every log under src into dst/measure_records/<top folder>/...; returns counts."""
    done = dst / ".done"
    if done.exists():
        return json.loads(done.read_text())
    if dst.exists():
        shutil.rmtree(dst)
    n_lines = n_rewritten = n_bytes = 0
    for f in sorted(src.rglob("*.json.gz")):
        rel = f.relative_to(src)
        t = dst / "measure_records" / rel
        t.parent.mkdir(parents=True, exist_ok=True)
        if c == 0:
            shutil.copyfile(f, t)
            data = gzip.decompress(f.read_bytes())
            n_lines += data.count(b"\n")
            n_bytes += len(data)
            continue
        out = []
        for line in gzip.decompress(f.read_bytes()).splitlines(keepends=True):
            new, ok = rewrite_line(line, c)
            n_rewritten += ok
            out.append(new)
        data = b"".join(out)
        n_lines += data.count(b"\n")
        n_bytes += len(data)
        t.write_bytes(gzip.compress(data, compresslevel=1))
    info = {"lines": n_lines, "rewritten": n_rewritten, "bytes": n_bytes}
    done.write_text(json.dumps(info))
    return info


# ----------------------------------------------------------------------------------------------------------------
# one configuration, in a fresh process

def one(a) -> None:
    res: dict = {}
    if a.one == "convert":
        from tenset_curate.convert import convert

        if a.executor == "ray":
            from tenset_curate.executors import ensure_ray

            t0 = time.perf_counter()
            ensure_ray(None, a.workers)
            res["ray_init_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        s = convert(a.inputs, Path(a.dest), workers=a.workers, executor=a.executor)
        res["seconds"] = time.perf_counter() - t0
        t = s["totals"]
        res.update(rows=t["rows"], lines=t["lines"], quarantined=t["quarantined"], balanced=t["balanced"],
                   failed=s["inputs_failed"], inputs=s["inputs"])
        import duckdb

        files = [str(p) for p in Path(a.dest).glob("records/*/*.parquet")]
        res["tasks"] = duckdb.sql(f"SELECT count(DISTINCT (hardware, task_id)) FROM read_parquet({files!r})").fetchall()[0][0]
    elif a.one == "catalog":
        from tenset_curate.catalog import build_catalog

        t0 = time.perf_counter()
        build_catalog(Path(a.inputs[0]))
        res["seconds"] = time.perf_counter() - t0
        res["rows"] = res["shards"] = len(list(Path(a.inputs[0]).glob("records/*/*.parquet")))
    else:
        from tenset_curate.prune import prune

        t0 = time.perf_counter()
        s = prune(Path(a.inputs[0]), Path(a.dest), a.ratio, a.method, seed=0, report=False, workers=a.workers)
        res["seconds"] = time.perf_counter() - t0
        res.update(rows=s["records_before"], kept=s["records_after"], ratio_achieved=s["ratio_achieved"])
    print("RESULT " + json.dumps(res), flush=True)


def _status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def measured(cmd: list[str]) -> dict:
    """Run cmd; poll its process tree for memory; return its RESULT plus memory and load figures."""
    import psutil

    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    hwm: dict[int, tuple[str, int]] = {}
    peak_tree = 0
    stop = threading.Event()

    def poll():
        nonlocal peak_tree
        root = psutil.Process(p.pid)
        while not stop.is_set():
            try:
                procs = [root] + root.children(recursive=True)
            except psutil.Error:
                break
            tree = 0
            for q in procs:
                rss = _status_kb(q.pid, "VmRSS")
                h = _status_kb(q.pid, "VmHWM")
                if rss is None or h is None:
                    continue
                tree += rss
                try:
                    name = q.name()
                except psutil.Error:
                    name = "?"
                hwm[q.pid] = (name, max(h, hwm.get(q.pid, ("", 0))[1]))
            peak_tree = max(peak_tree, tree)
            stop.wait(0.05)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    out, err = p.communicate()
    stop.set()
    th.join()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-3000:]}")
    res = json.loads([x for x in out.splitlines() if x.startswith("RESULT ")][-1][7:])
    driver = hwm.get(p.pid, ("", 0))[1]
    workers = [h for pid, (name, h) in hwm.items() if pid != p.pid and (name.startswith("ray::") or
                                                                       name.startswith("python"))]
    res.update(wall_s=round(time.perf_counter() - t0, 2), peak_tree_mb=round(peak_tree / 1024, 1),
               driver_hwm_mb=round(driver / 1024, 1), worker_hwm_mb=round(max(workers, default=0) / 1024, 1),
               n_processes=len(hwm), load_before=round(load0, 2), load_after=round(os.getloadavg()[0], 2))
    return res


# ----------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", default=str(REPO.parent / "shared" / "realdata" / "ansor"))
    ap.add_argument("--work", default="/tmp/tc-bench-scale")
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16], help="copies for the linearity runs")
    ap.add_argument("--scale-configs", nargs="+", default=["local:1", "ray:2"], help="run at every scale")
    ap.add_argument("--configs", nargs="+", default=["local:1", "local:2", "ray:1", "ray:2"])
    ap.add_argument("--config-scales", type=int, nargs="+", default=[4], help="scales at which --configs run")
    ap.add_argument("--prune-runs", nargs="*", default=["random:1:1", "random:4:1", "random:16:1", "random:4:2",
                                                          "hybrid:1:1", "hybrid:4:1"], help="method:scale:workers")
    ap.add_argument("--ratio", type=float, default=0.45)
    ap.add_argument("--out", default=str(REPO / "reports" / "scale.md"))
    ap.add_argument("--rerender", action="store_true", help="rewrite the report from the --out .json rows")
    ap.add_argument("--catalog-only", action="store_true",
                    help="after a run: peak memory of convert's catalog build alone on the kept local:1 outputs, "
                         "added to the --out .json, report rewritten")
    ap.add_argument("--prune-only", action="store_true",
                    help="re-run only --prune-runs on the kept x<N>-local1 outputs of an earlier run; their rows "
                         "replace the earlier ones in the --out .json, the report is rewritten")
    ap.add_argument("--one", choices=["convert", "prune", "catalog"], help=argparse.SUPPRESS)
    ap.add_argument("--inputs", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--dest", help=argparse.SUPPRESS)
    ap.add_argument("--executor", default="local", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--method", default="redundancy", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        return one(a)
    if a.catalog_only:
        old = json.loads(Path(a.out).with_suffix(".json").read_text())
        me = [sys.executable, str(Path(__file__).resolve())]
        old["catalog_rows"] = []
        for d in sorted(Path(a.work).glob("out/x*-local1"), key=lambda d: int(d.name[1:].split("-")[0])):
            r = measured(me + ["--one", "catalog", "--inputs", str(d)])
            r.update(scale=int(d.name[1:].split("-")[0]))
            old["catalog_rows"].append(r)
            print(json.dumps(r), flush=True)
        Path(a.out).with_suffix(".json").write_text(json.dumps(old, indent=1) + "\n")
        a.rerender = True
    if a.prune_only:
        old = json.loads(Path(a.out).with_suffix(".json").read_text())
        fresh = prune_rows(a, parse_prune_runs(a.prune_runs), Path(a.work))
        done = {(r["method"], r["scale"], r["workers"]) for r in fresh}
        old["rows"] = [r for r in old["rows"] if not (r["step"] == "prune" and (r["method"], r["scale"], r["workers"])
                                                      in done)] + fresh
        old["command"] += " && python benchmarks/scale.py " + " ".join(sys.argv[1:])
        old["loadavg_at_end"] = res_load()
        Path(a.out).with_suffix(".json").write_text(json.dumps(old, indent=1) + "\n")
        a.rerender = True
    if a.rerender:
        old = json.loads(Path(a.out).with_suffix(".json").read_text())
        res = summarize(old["rows"], sorted({r["scale"] for r in old["rows"] if r["step"] == "convert"
                                             and r["executor"] == "local" and r["workers"] == 1}), a,
                        [{"rewritten": old["lines_rewritten_per_copy"], "lines": old["lines_per_copy"]}],
                        old["copies_seconds"], old["wall_seconds"])
        res.update(command=old["command"], loadavg_at_end=old["loadavg_at_end"])
        if "catalog_rows" in old:
            res["catalog_rows"] = old["catalog_rows"]
        return write(res, Path(a.out))

    t_start = time.time()
    work = Path(a.work)
    scales = sorted(set(a.scales))
    config_scales = sorted(set(a.config_scales))
    prune_runs = parse_prune_runs(a.prune_runs)
    prune_scales = sorted({n for _, n, _ in prune_runs})
    n_copies = max(scales + config_scales + prune_scales)
    t0 = time.perf_counter()
    copies = [make_copy(Path(a.logs), work / "in" / f"c{c:02d}", c) for c in range(n_copies)]
    t_copy = time.perf_counter() - t0
    print(f"copies: {n_copies} in {t_copy:.0f} s; per copy {copies[0]['lines']} lines", flush=True)
    me = [sys.executable, str(Path(__file__).resolve())]
    rows = []
    plan = [(n, "local", 1) for n in sorted(set(scales + prune_scales))]  # prune reads the local:1 output
    for c in a.scale_configs:
        ex, w = c.split(":")
        plan += [(n, ex, int(w)) for n in scales if (n, ex, int(w)) not in plan]
    for n in config_scales:
        for c in a.configs:
            ex, w = c.split(":")
            if (n, ex, int(w)) not in plan:
                plan.append((n, ex, int(w)))
    for n, ex, w in plan:
        dest = work / "out" / f"x{n}-{ex}{w}"
        if dest.exists():
            shutil.rmtree(dest)
        inputs = [str(work / "in" / f"c{c:02d}") for c in range(n)]
        r = measured(me + ["--one", "convert", "--executor", ex, "--workers", str(w), "--dest", str(dest),
                           "--inputs", *inputs])
        r.update(step="convert", scale=n, executor=ex, workers=w, records_per_s=round(r["rows"] / r["seconds"]))
        rows.append(r)
        print(json.dumps(r), flush=True)
        if not (ex == "local" and w == 1 and n in prune_scales):
            shutil.rmtree(dest)
    rows += prune_rows(a, prune_runs, work)
    res = summarize(rows, scales, a, copies, t_copy, time.time() - t_start)
    write(res, Path(a.out))


def parse_prune_runs(specs: list[str]) -> list[tuple[str, int, int]]:
    """``method:scale:workers`` specs -> (method, scale, workers)."""
    return [(m, int(n), int(w)) for m, n, w in (x.split(":") for x in specs)]


def prune_rows(a, prune_runs, work: Path) -> list[dict]:
    me = [sys.executable, str(Path(__file__).resolve())]
    rows = []
    for method, n, w in prune_runs:
        src = work / "out" / f"x{n}-local1"
        dest = work / "out" / f"x{n}-pruned"
        r = measured(me + ["--one", "prune", "--method", method, "--workers", str(w), "--dest", str(dest),
                           "--inputs", str(src)])
        r.update(step="prune", scale=n, executor="local", workers=w, method=method,
                 records_per_s=round(r["rows"] / r["seconds"]))
        rows.append(r)
        print(json.dumps(r), flush=True)
        shutil.rmtree(dest)
    return rows


def res_load():
    return [round(x, 2) for x in os.getloadavg()]


def _get(rows, step, scale, ex="local", w=1, method=None):
    for r in rows:
        if r["step"] == step and r["scale"] == scale and r["executor"] == ex and r["workers"] == w and (
                method is None or r.get("method") == method):
            return r
    return None


def summarize(rows, scales, a, copies, t_copy, wall) -> dict:
    lo, hi = min(scales), max(scales)
    c1, cN = _get(rows, "convert", lo), _get(rows, "convert", hi)
    ratios: dict = {}
    if hi > lo:
        ratios[f"convert_time_{hi}x_over_{lo}x"] = round(cN["seconds"] / c1["seconds"], 2)
        # one process: its VmHWM is the exact peak (the tree sum is polled and can miss a spike)
        ratios[f"convert_mem_{hi}x_over_{lo}x"] = round(cN["driver_hwm_mb"] / c1["driver_hwm_mb"], 3)
        ratios[f"tasks_{hi}x_over_{lo}x"] = round(cN["tasks"] / c1["tasks"], 3)
        r1, rN = _get(rows, "convert", lo, "ray", 2), _get(rows, "convert", hi, "ray", 2)
        if r1 and rN:
            ratios[f"ray2_time_{hi}x_over_{lo}x"] = round(rN["seconds"] / r1["seconds"], 2)
            ratios[f"ray2_mem_{hi}x_over_{lo}x"] = round(rN["peak_tree_mb"] / r1["peak_tree_mb"], 3)
            ratios[f"ray2_driver_mem_{hi}x_over_{lo}x"] = round(rN["driver_hwm_mb"] / r1["driver_hwm_mb"], 3)
    for method in sorted({r["method"] for r in rows if r["step"] == "prune"}):
        ps = sorted(r["scale"] for r in rows if r["step"] == "prune" and r["method"] == method and r["workers"] == 1)
        if len(ps) > 1:
            p1 = _get(rows, "prune", ps[0], method=method)
            pN = _get(rows, "prune", ps[-1], method=method)
            ratios[f"prune_{method}_time_{ps[-1]}x_over_{ps[0]}x"] = round(pN["seconds"] / p1["seconds"], 2)
            ratios[f"prune_{method}_mem_{ps[-1]}x_over_{ps[0]}x"] = round(pN["driver_hwm_mb"] / p1["driver_hwm_mb"], 3)
    speedups = {}
    prune_speedups = {}
    for r in rows:
        if r["workers"] == 2:
            one_w = _get(rows, r["step"], r["scale"], r["executor"], 1, r.get("method"))
            if one_w and r["step"] == "convert":
                speedups[f"{r['executor']}_{r['scale']}x"] = round(r["records_per_s"] / one_w["records_per_s"], 3)
            elif one_w:
                prune_speedups[f"prune_{r['method']}_{r['scale']}x"] = round(r["records_per_s"] /
                                                                            one_w["records_per_s"], 3)
    # per-worker throughput: the 1-worker local rate at the largest scale (steady state, no pool overhead)
    per_worker = cN["records_per_s"]
    best_speedup = max(speedups.values(), default=None)
    worst_speedup = min(speedups.values(), default=None)
    eff = min(1.0, best_speedup / 2) if best_speedup else 1.0
    eff_w = min(1.0, worst_speedup / 2) if worst_speedup else 1.0
    est = {
        "records": TENSET_RECORDS, "workers": 16, "records_per_s_per_worker": per_worker,
        "parallel_efficiency": round(eff, 3),
        "minutes_ideal": round(TENSET_RECORDS / (per_worker * 16) / 60, 1),
        "minutes_at_measured_efficiency": round(TENSET_RECORDS / (per_worker * 16 * eff) / 60, 1),
        "parallel_efficiency_worst": round(eff_w, 3),
        "minutes_at_worst_efficiency": round(TENSET_RECORDS / (per_worker * 16 * eff_w) / 60, 1),
    }
    return {"command": "python benchmarks/scale.py " + " ".join(sys.argv[1:]), "cpus": os.cpu_count(),
            "records_per_copy": c1["rows"] // lo, "copies_seconds": round(t_copy, 1),
            "lines_rewritten_per_copy": copies[-1]["rewritten"], "lines_per_copy": copies[-1]["lines"],
            "loadavg_at_end": res_load(),
            "wall_seconds": round(wall), "ratios": ratios, "speedup_2_over_1": speedups,
            "prune_speedup_2_over_1": prune_speedups, "estimate": est, "rows": rows}


def write(res: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    r, s, e = res["ratios"], res["speedup_2_over_1"], res["estimate"]
    L = ["# Scale benchmark: convert and prune on copies of the real Ansor logs", "",
         f"Command: `{res['command']}` on {res['cpus']} cores (shared machine; load average in the table), "
         f"{res['wall_seconds']} s in all; load average (1, 5, 15 min) at the end {res['loadavg_at_end']}.", "",
         f"Input: every Ansor log under shared/realdata/ansor, {res['records_per_copy']} records per copy; copy c >= 1 "
         f"renames the workload of each record ({res['lines_rewritten_per_copy']} of {res['lines_per_copy']} lines "
         "per copy; the rest are comments) so each copy has its own task ids (see the script's docstring). "
         f"Making the copies took {res['copies_seconds']} s (cached between runs).", "",
         "## Runs", "",
         "| step | scale | executor | workers | records | tasks | seconds | records/s | peak tree MB | driver MB | "
         "worker MB | procs | load |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in res["rows"]:
        L.append(f"| {x['step']}{' (' + x['method'] + ')' if 'method' in x else ''} | {x['scale']}x | {x['executor']} | "
                 f"{x['workers']} | {x['rows']} | {x.get('tasks', '')} | {x['seconds']:.1f} | {x['records_per_s']} | "
                 f"{x['peak_tree_mb']} | {x['driver_hwm_mb']} | {x['worker_hwm_mb'] or ''} | {x['n_processes']} | "
                 f"{x['load_before']}->{x['load_after']} |")
    L += ["", "Ray start-up (not in the seconds above): " + ", ".join(
        f"{x['scale']}x/{x['workers']}w {x['ray_init_s']} s" for x in res["rows"] if "ray_init_s" in x) + ".", "",
        "## Against the goals (issue 8)", "", "| measure | value | goal |", "|---|---:|---|"]
    goals = {"convert_time": "<= 18 (16x input)", "convert_mem": "<= 1.5", "tasks": "= the scale ratio",
             "prune_random_time_16x": "<= 18 (16x input)", "prune_random_mem_16x": "<= 1.5"}
    for k, v in r.items():
        g = next((gv for gk, gv in goals.items() if k.startswith(gk)), "")
        L.append(f"| {k} | {v} | {g} |")
    for k, v in {**s, **res.get("prune_speedup_2_over_1", {})}.items():
        L.append(f"| throughput 2 workers / 1 worker, {k} | {v} | >= 1.7 |")
    loads = [x["load_before"] for x in res["rows"]] + [x["load_after"] for x in res["rows"]]
    L.append(f"| records/s per worker (local, 1 worker, largest scale) | {e['records_per_s_per_worker']} | |")
    L.append(f"| TenSet 52M records, 16 workers, ideal scaling (minutes) | {e['minutes_ideal']} | < 15 |")
    L.append(f"| TenSet 52M records, 16 workers, at the best measured 2-worker efficiency {e['parallel_efficiency']} "
             f"(minutes) | {e['minutes_at_measured_efficiency']} | < 15 |")
    L.append(f"| TenSet 52M records, 16 workers, at the worst measured 2-worker efficiency "
             f"{e['parallel_efficiency_worst']} (minutes) | {e['minutes_at_worst_efficiency']} | < 15 |")
    L += ["", f"The 1-minute load average stayed between {min(loads)} and {max(loads)} on {res['cpus']} cores during "
          "the runs (the benchmark's own processes included; the machine is shared): where it rises above the "
          "core count, a second worker competes with other processes, so the 2-worker speedups are a lower bound "
          "of what idle cores give.",
          "", "## Where the memory goes", ""]
    w1 = [x for x in res["rows"] if x["step"] == "convert" and x["executor"] == "ray" and x["workers"] == 2]
    if len(w1) > 1:
        L.append(f"Ray, 2 workers: each convert worker's peak stays at {w1[0]['worker_hwm_mb']} MB at "
                 f"{w1[0]['scale']}x and {w1[-1]['worker_hwm_mb']} MB at {w1[-1]['scale']}x (ratio "
                 f"{w1[-1]['worker_hwm_mb'] / w1[0]['worker_hwm_mb']:.2f}): converting one input is constant "
                 f"memory. The driver, which converts nothing under Ray, grows from {w1[0]['driver_hwm_mb']} to "
                 f"{w1[-1]['driver_hwm_mb']} MB (the manifest and the catalog over every shard; the catalog's fixed-schema "
                 "views no longer read every footer). Ray's own processes (gcs_server, raylet, agents: 'procs' column) add a constant ~0.6 "
                 "GB to the tree.")
    if res.get("catalog_rows"):
        L.append("")
        L.append("The catalog build alone (`catalog.build_catalog`, which convert runs at the end; fresh process, "
                 "`python benchmarks/scale.py --catalog-only`): " + ", ".join(
                     f"{x['scale']}x ({x['shards']} shards) {x['driver_hwm_mb']} MB in {x['seconds']:.1f} s"
                     for x in res["catalog_rows"]) + ". Its views read every shard's footer "
                 "(`read_parquet(..., union_by_name = true)`), so its memory grows with the number of shard files.")
    L.append("")
    L.append("Prune streams: `prune.plan_units` cuts the dataset into units of whole tasks (about "
             "`prune.UNIT_RECORDS` records each; a TenSet task file is one component), pass 1 prepares each unit "
             "(labels, features, duplicate keys) and returns per-task counts, the kept budget is allocated from the "
             "counts alone, pass 2 selects and writes each unit's shard. A process holds one unit at a time, so its "
             "peak memory does not depend on the dataset's size; with 2 workers each worker process holds one unit.")
    L += ["", "Estimate: minutes = 52,000,000 / (records/s per worker x 16 x efficiency) / 60, with efficiency = "
          "min(1, measured 2-worker speedup / 2) (best and worst of the runs). Convert's work is per group of input files (~16 MB of JSON each: "
          "TenSet's 52M records make ~3,500 groups, far more items than workers), so it shards evenly; the efficiency on 16 cores is an assumption carried "
          "over from 2. Prune's units run on the same executors (one random stream per task, so the output "
          "does not depend on the executor or the number of workers)."]
    out.write_text("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
