#!/usr/bin/env python3
"""report.py RESULTS_DIR: the table of a bench/run.sh run, from its raw results.

Reads RESULTS_DIR/bench-samples.tsv (one line per measured sample: figure, x, mode, repeat,
value, unit), bench-figures.tsv (what each figure is) and bench-info.txt (the machine, the
date, the commit), and throttle-results.tsv when there is one; writes bench-results.tsv
(per figure and x, each mode's sample count, median, min, max and failed runs) and
bench-results.md (the same as a table, "median (min-max)", the ratios of the medians, then
issue 12's goals checked against this run, then the SM-share table). A cell where some runs
failed shows the median of the others and how many failed ("1 FAIL"); a goal that rests on a
cell with failed runs is never "met". Python 3 standard library only, so that
it runs on the GPU machine; bench/plot.py draws the plots from the same files.
"""
import collections
import os
import statistics
import sys

MODES = ("native", "mps", "mpsshim")
MODE_NAMES = {"native": "native", "mps": "native MPS", "mpsshim": "mpsshim"}


def mode_name(mode):
    return MODE_NAMES.get(mode, mode)


def variants(info, cells):
    """The variants of mpsshim of a run (bench/run.sh --variant), as their modes
    (mpsshim-NAME): in bench-info.txt's order, else those the samples name."""
    names = info.get("variants", "").split()
    if names:
        return ["mpsshim-" + n for n in names]
    return sorted({k[2] for k in cells if k[2].startswith("mpsshim-")})


def all_modes(info, cells):
    """Every mode of a run: native, MPS, mpsshim, then mpsshim's variants."""
    return list(MODES) + variants(info, cells)


def read_tsv(path):
    """Rows of a tab-separated file, header line first; [] when it is missing."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def num(s):
    try:
        return float(s)
    except ValueError:
        return None


def load(d):
    """info (dict), figures (ordered dict: name -> dict), cells {(figure, x, mode): [values]}."""
    info = {}
    for row in read_tsv(os.path.join(d, "bench-info.txt")):
        if len(row) >= 2:
            info[row[0]] = row[1]
    figures = {}
    rows = read_tsv(os.path.join(d, "bench-figures.tsv"))
    for r in rows[1:]:
        figures[r[0]] = {"unit": r[1], "better": r[2], "xlabel": r[3], "what": r[4]}
    cells = {}
    samples = read_tsv(os.path.join(d, "bench-samples.tsv"))
    if not samples:
        sys.exit("report: no samples in %s/bench-samples.tsv" % d)
    for r in samples[1:]:
        fig, x, mode, _rep, value = r[:5]
        figures.setdefault(fig, {"unit": r[5] if len(r) > 5 else "", "better": "lower",
                                 "xlabel": "", "what": fig})
        cells.setdefault((fig, x, mode), []).append(value)
    return info, figures, cells


def xkey(x):
    v = num(x)
    return (0, v) if v is not None else (1, x)


def rows_of(figures, cells):
    """(figure, x) in the figures' order, x ascending."""
    out = []
    for fig in figures:
        xs = sorted({k[1] for k in cells if k[0] == fig}, key=xkey)
        out += [(fig, x) for x in xs]
    return out


# A cell's samples: n numbers, their median, min and max (None without numbers); failed, the
# runs that failed; state '' when there is a number, else FAIL (every run failed) or n/a
# (none could run here).
Cell = collections.namedtuple("Cell", "n med lo hi state failed")


def stats(values):
    """The Cell of a list of sample values (numbers, FAIL, n/a)."""
    nums = [v for v in (num(s) for s in values) if v is not None]
    failed = sum(1 for s in values if s == "FAIL")
    if nums:
        return Cell(len(nums), statistics.median(nums), min(nums), max(nums), "", failed)
    return Cell(0, None, None, None, "FAIL" if failed else "n/a", failed)


def cell_text(c):
    """'median (min-max)', with ' k FAIL' when k runs failed; FAIL or n/a without a number."""
    if c.state:
        return c.state
    text = fmt(c.med) if c.n == 1 or c.lo == c.hi else "%s (%s-%s)" % (fmt(c.med), fmt(c.lo),
                                                                      fmt(c.hi))
    return text + (" %d FAIL" % c.failed if c.failed else "")


def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    if a >= 1:
        return "%.2f" % v
    return "%.3g" % v


def size_label(x):
    v = num(x)
    if v is None:
        return x
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= k and v % k == 0:
            return "%d %s" % (v // k, unit)
    return "%d B" % v


def row_label(figures, fig, x):
    f = figures[fig]
    if x in ("", "-"):
        return fig
    if f["xlabel"] == "bytes":
        return "%s %s" % (fig, size_label(x))
    return "%s %s=%s" % (fig, f["xlabel"] or "x", x)


def goals(cells, cpu, shim="mpsshim", issue=12):
    """Issue 12's goal rows against this run (or, with issue=29, issue 29's, those of figures
    the run measured): (goal, medians said, verdict, whether the run had
    the medians to judge it), for mpsshim or, with `shim`, for one of its variants
    (mpsshim-NAME) in mpsshim's place. A goal whose cells had
    failed runs is judged on the runs measured, but its verdict says how many failed instead
    of "met"."""
    # mode -> x -> (failed, runs) of the cells the goal read. Figures of one x come from the
    # same runs (a copysweep run gives pinned and registered figures): the most failed of them
    # counts; different x are different runs, and add up.
    used = collections.OrderedDict()

    def m(fig, x, mode):
        c = stats(cells.get((fig, x, mode), []))
        per_x = used.setdefault(mode, {})
        per_x[x] = max(per_x.get(x, (0, 0)), (c.failed, c.failed + c.n))
        return c.med

    out = []

    def check(goal, ok, said):
        verdict = "-" if ok is None or cpu else ("met" if ok else "NOT met")
        failed = []
        for mode, per_x in used.items():
            k, n = sum(v[0] for v in per_x.values()), sum(v[1] for v in per_x.values())
            if k:
                failed.append("%s: %d of %d runs failed" % (mode_name(mode), k, n))
        if failed:
            verdict = "%s; on the runs measured: %s" % ("; ".join(failed), verdict)
        used.clear()
        out.append((goal, said, verdict, ok is not None))

    S = shim
    if issue == 29:
        return goals29(cells, S, m, check, out)
    for n in ("8", "16"):
        s, p = m("mpi_gpu_loop_s", n, S), m("mpi_gpu_loop_s", n, "mps")
        check("MPI job, %s ranks: mpsshim's GPU loop <= MPS's" % n,
              None if s is None or p is None else s <= p,
              "%s %s s, MPS %s s" % (S, fmt(s), fmt(p)))
    for n in ("8", "16"):
        s, p = m("fleet_steps_per_s", n, S), m("fleet_steps_per_s", n, "mps")
        check("inference fleet, %s processes: mpsshim's steps/s >= MPS's" % n,
              None if s is None or p is None else s >= p,
              "%s %s, MPS %s steps/s" % (S, fmt(s), fmt(p)))
    pairs = [(n, m("fleetc_steps_per_s", n, S), m("fleetc_steps_per_s", n, "mps"))
             for n in ("16", "32")]
    check("driver-API fleet at 16 and 32 processes: mpsshim >= MPS",
          None if any(s is None or p is None for _n, s, p in pairs)
          else all(s >= p for _n, s, p in pairs),
          "; ".join("%s: %s %s, MPS %s steps/s" % (n, S, fmt(s), fmt(p)) for n, s, p in pairs))
    for fig, extra, what in (("launch_sync_us", 1.0, "launch + sync"),
                             ("launch_ctxsync_us", 1.0, "launch + context sync"),
                             ("stream_query_us", 0.5, "cuStreamQuery")):
        s, nat = m(fig, "-", S), m(fig, "-", "native")
        check("%s <= native + %.1f us" % (what, extra),
              None if s is None or nat is None else s <= nat + extra,
              "%s %s us, native %s us" % (S, fmt(s), fmt(nat)))
    s, nat = m("launch_async_us", "-", S), m("launch_async_us", "-", "native")
    check("drained launch rate >= native's (launch_async_us <= native's)",
          None if s is None or nat is None else s <= nat,
          "%s %s us, native %s us" % (S, fmt(s), fmt(nat)))
    ratios = []
    for x in sorted({k[1] for k in cells if k[0] == "overlap_s"}, key=xkey):
        s, p = m("overlap_s", x, S), m("overlap_s", x, "mps")
        if s is None or not p:
            ratios = []
            break
        ratios.append((s / p, x))
    worst = max(ratios) if ratios else None
    check("overlap at parity with MPS (mpsshim <= 1.10 x MPS) at every process count",
          None if worst is None else worst[0] <= 1.10,
          "worst: %s x MPS at %s processes" % (fmt(worst[0]), worst[1]) if worst
          else "no pair of medians at every count")
    for d in ("htod", "dtoh"):
        fig = "copy_%s_pageable_GBps" % d
        xs = sorted({k[1] for k in cells if k[0] == fig}, key=xkey)
        x = xs[-1] if xs else ""
        s, nat = m(fig, x, S), m(fig, x, "native")
        check("pageable %s at %s >= 1.5 x native" % (d, size_label(x) or "the largest size"),
              None if s is None or nat is None else s >= 1.5 * nat,
              "%s %s, native %s GB/s" % (S, fmt(s), fmt(nat)))
    for d in ("htod", "dtoh"):
        fig = "copy_%s_registered_GBps" % d
        xs = sorted({k[1] for k in cells if k[0] == fig}, key=xkey)
        x = xs[-1] if xs else ""
        s, pin = m(fig, x, S), m("copy_%s_pinned_GBps" % d, x, S)
        check("registered %s at %s >= 0.9 x pinned (through mpsshim)" % (
            d, size_label(x) or "the largest size"),
              None if s is None or pin is None else s >= 0.9 * pin,
              "registered %s, pinned %s GB/s" % (fmt(s), fmt(pin)))
    s, nat = m("fleet_start_s", "1", S), m("fleet_start_s", "1", "native")
    check("PyTorch start to first result below native's", None if s is None or nat is None
          else s < nat, "%s %s s, native %s s" % (S, fmt(s), fmt(nat)))
    s, nat = m("idle8_MiB", "-", S), m("idle8_MiB", "-", "native")
    check("8 idle clients within about one context (<= 1.25 x native's / 8)",
          None if s is None or nat is None else s <= 1.25 * nat / 8,
          "%s %s MiB, native %s MiB for 8" % (S, fmt(s), fmt(nat)))
    return out


def goals29(cells, S, m, check, out):
    """Issue 29's goals ("clients never wait for each other"), for goals(): the cold MPI job
    at parity with MPS (the overlap goal's bar, <= 1.10 x) at every rank count, each figure
    the run measured; the fleet of 32 at MPS's steps/s or better (8 and 16 are issue 12's);
    the fleet's start with the most processes together at parity with MPS's."""
    cold = [f for f in ("mpi_cold75_s", "mpi_cold540_s", "mpi_cold75_2gpu_s",
                        "mpi_cold540_2gpu_s") if any(k[0] == f for k in cells)]
    cold += sorted({k[0] for k in cells if k[0].startswith("mpi_cold")} - set(cold))
    for fig in cold:
        ratios = []
        for x in sorted({k[1] for k in cells if k[0] == fig}, key=xkey):
            s, p = m(fig, x, S), m(fig, x, "mps")
            if s is None or not p:
                ratios = []
                break
            ratios.append((s / p, x, s, p))
        worst = max(ratios) if ratios else None
        check("cold MPI job, %s: mpsshim <= 1.10 x MPS at every rank count" % fig,
              None if worst is None else worst[0] <= 1.10,
              "worst: %s x MPS at %s ranks (%s %s s, MPS %s s)" % (
                  fmt(worst[0]), worst[1], S, fmt(worst[2]), fmt(worst[3])) if worst
              else "no pair of medians at every rank count")
    if any(k[0] == "fleet_steps_per_s" and k[1] == "32" for k in cells):
        s, p = m("fleet_steps_per_s", "32", S), m("fleet_steps_per_s", "32", "mps")
        check("inference fleet, 32 processes: mpsshim's steps/s >= MPS's",
              None if s is None or p is None else s >= p,
              "%s %s, MPS %s steps/s" % (S, fmt(s), fmt(p)))
    xs = sorted({k[1] for k in cells if k[0] == "fleet_start_s"}, key=xkey)
    if xs and xs[-1] != "1":
        x = xs[-1]
        s, p = m("fleet_start_s", x, S), m("fleet_start_s", x, "mps")
        check("fleet start, %s processes together: mpsshim <= 1.10 x MPS" % x,
              None if s is None or p is None else s <= 1.10 * p,
              "%s %s s, MPS %s s" % (S, fmt(s), fmt(p)))
    return out


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else "%.2f" % (a / b)


def write(d):
    info, figures, cells = load(d)
    rows = rows_of(figures, cells)
    var = variants(info, cells)
    modes = all_modes(info, cells)
    with open(os.path.join(d, "bench-results.tsv"), "w") as t:
        t.write("figure\tx\tunit\tbetter")
        for mode in modes:
            t.write("\t%s_n\t%s_median\t%s_min\t%s_max\t%s_failed" % ((mode,) * 5))
        t.write("\n")
        for fig, x in rows:
            f = figures[fig]
            t.write("%s\t%s\t%s\t%s" % (fig, x, f["unit"], f["better"]))
            for mode in modes:
                c = stats(cells.get((fig, x, mode), ["n/a"]))
                if c.state:
                    t.write("\t%d\t%s\t%s\t%s\t%d" % (c.n, c.state, c.state, c.state, c.failed))
                else:
                    t.write("\t%d\t%.6g\t%.6g\t%.6g\t%d" % (c.n, c.med, c.lo, c.hi, c.failed))
            t.write("\n")

    cpu = info.get("cpu_test_driver") == "1"
    md = []
    if cpu:
        md += ["**CPU TEST DRIVER (MPSSHIM_BENCH_CPU=1): these numbers test the scripts; they say "
               "nothing about GPUs.**", ""]
    md += ["# mpsshim benchmarks: native / native MPS / mpsshim%s" % (
        "".join(" / " + v for v in var)), ""]
    for k in ("gpu", "driver", "date", "commit", "built_from", "cpus", "run", "repeats",
              "took_s"):
        if k in info:
            md.append("- %s: %s" % (k, info[k]))
    for v in var:
        md.append("- variant %s: mpsshim with %s" % (
            v, info.get("variant_" + v[len("mpsshim-"):], "?").replace(",", ", ")))
    md += ["", "Each cell: median (min-max) of the repeats; n = samples per cell. Ratios are of "
           "the medians; `better` says which way is better. `k FAIL`: k runs failed, the median "
           "is of the others (bench-summary.txt names them, the mode's bench-*.log has their "
           "output); `FAIL`: every run failed."
           + (" A variant's cell adds [its ratio to native, to MPS]." if var else ""), "",
           "| figure | unit | better | n | native | native MPS | mpsshim | mpsshim/native "
           "| mpsshim/MPS |" + "".join(" %s |" % v for v in var),
           "|" + " --- |" * (9 + len(var))]
    for fig, x in rows:
        f = figures[fig]
        cols, meds, ns = {}, {}, set()
        for mode in modes:
            c = stats(cells.get((fig, x, mode), ["n/a"]))
            cols[mode] = cell_text(c)
            meds[mode] = c.med
            if c.n:
                ns.add(c.n)
        extra = ["%s [%s, %s]" % (cols[v], ratio(meds[v], meds["native"]),
                                  ratio(meds[v], meds["mps"])) if meds[v] is not None else cols[v]
                 for v in var]
        md.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            row_label(figures, fig, x), f["unit"], f["better"],
            "/".join(str(n) for n in sorted(ns)) or "0",
            " | ".join(cols[mode] for mode in MODES),
            ratio(meds["mpsshim"], meds["native"]), ratio(meds["mpsshim"], meds["mps"]))
            + "".join(" %s |" % e for e in extra))
    ours = goals(cells, cpu)
    md += ["", "## Issue 12's goals, in this run", "", "| goal | medians | verdict |",
           "| --- | --- | --- |"]
    md += ["| %s | %s | %s |" % g[:3] for g in ours]
    ours29 = goals(cells, cpu, issue=29)
    if ours29:
        md += ["", "## Issue 29's goals, in this run", "", "Clients never wait for each other: "
               "the cold MPI job (`mpi_cold*`, a fresh job per sample) and the fleet as users "
               "start them, each row only where this run measured its figure.", "",
               "| goal | medians | verdict |", "| --- | --- | --- |"]
        md += ["| %s | %s | %s |" % g[:3] for g in ours29]
    if var:
        # The verdicts stay mpsshim's; each variant's would-be verdict, beside them.
        ours = ours + ours29
        theirs = [goals(cells, cpu, v) + goals(cells, cpu, v, 29) for v in var]
        md += ["", "## What each variant of mpsshim would give", "",
               "Each goal this run measured, judged with the variant in mpsshim's place (the same "
               "MPS and native runs): its verdict, then its medians.", "",
               "| goal | mpsshim |" + "".join(" %s |" % v for v in var),
               "|" + " --- |" * (2 + len(var))]
        for i, (goal, _said, verdict, judged) in enumerate(ours):
            if not judged and not any(t[i][3] for t in theirs):
                continue
            md.append("| %s | %s |" % (goal, verdict) + "".join(
                " %s (%s) |" % (t[i][2], t[i][1]) for t in theirs))
    md += ["", "## What the figures are", ""]
    md += ["- `%s` (%s, %s is better): %s" % (k, v["unit"], v["better"], v["what"])
           for k, v in figures.items()]
    thr = read_tsv(os.path.join(d, "throttle-results.tsv"))
    if thr:
        md += ["", "## SM shares and memory limits (bench/throttle.sh, one run)", "",
               "| " + " | ".join(thr[0]) + " |", "|" + " --- |" * len(thr[0])]
        md += ["| " + " | ".join(r) + " |" for r in thr[1:]]
    with open(os.path.join(d, "bench-results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    return os.path.join(d, "bench-results.md")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench/report.py RESULTS_DIR")
    print("wrote", write(sys.argv[1]))
