#!/usr/bin/env python3
"""plot.py RESULTS_DIR: the PNG plots of a bench/run.sh run, from its raw results.

Reads what bench/report.py reads (bench-samples.tsv, bench-figures.tsv, bench-info.txt,
throttle-results.tsv) and writes into RESULTS_DIR: scaling.png (the main plot: overlap, MPI
job, inference fleet, driver-API fleet, round trips, cold MPI job), overlap.png, mpi.png,
fleet.png, fleetc.png, calls.png, copy.png, sm_shares.png and, where the run measured the
cold MPI job, mpi_cold.png. Every point is a median, its bar the
min-max of the repeats (of those that measured, where some failed: the table says how many).
Needs matplotlib (pip install matplotlib); runs anywhere, so that a run made on a machine
without it is plotted afterwards from the copied results folder.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot.py: needs matplotlib (pip install matplotlib)")

STYLE = {"native": ("tab:gray", "o", "native"), "mps": ("tab:blue", "s", "native MPS"),
         "mpsshim": ("tab:red", "^", "mpsshim")}
# Variants of mpsshim (bench/run.sh --variant), in their order: dashed, these colours.
VARIANT_STYLE = [("tab:orange", "v"), ("tab:green", "D"), ("tab:purple", "P"),
                 ("tab:brown", "X"), ("tab:pink", "<"), ("tab:olive", ">"), ("tab:cyan", "*")]
MODES = list(report.MODES)  # with the run's variants once main() has read it


def style(mode):
    """(colour, marker, label, line style) of a mode's lines: variants dashed."""
    if mode in STYLE:
        return STYLE[mode] + ("-",)
    i = MODES.index(mode) - len(report.MODES) if mode in MODES else 0
    color, marker = VARIANT_STYLE[i % len(VARIANT_STYLE)]
    return color, marker, mode, "--"


def series(cells, fig, mode):
    """x, median, low error, high error lists of one figure's numeric points under a mode."""
    pts = []
    for (f, x, m), values in cells.items():
        if f != fig or m != mode:
            continue
        c = report.stats(values)
        xv = report.num(x)
        if c.n and xv is not None:
            pts.append((xv, c.med, c.med - c.lo, c.hi - c.med))
    pts.sort()
    return [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], [p[3] for p in pts]


def scaling(ax, cells, figures, fig, title, log_y=False):
    """One figure against its x (processes, ranks), a line per mode; False when no data."""
    drawn = False
    for mode in MODES:
        xs, ys, el, eh = series(cells, fig, mode)
        if not xs:
            continue
        color, marker, label, ls = style(mode)
        ax.errorbar(xs, ys, yerr=[el, eh], color=color, marker=marker, label=label, ls=ls,
                    capsize=3)
        drawn = True
    f = figures.get(fig, {})
    ax.set_xscale("log", base=2)
    xs = sorted({report.num(k[1]) for k in cells if k[0] == fig} - {None})
    ax.set_xticks(xs)
    ax.set_xticklabels(["%g" % x for x in xs])
    ax.minorticks_off()
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(f.get("xlabel", "x"))
    ax.set_ylabel("%s (%s is better)" % (f.get("unit", ""), f.get("better", "")))
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "not measured in this run", ha="center", transform=ax.transAxes)
    return drawn


def calls(ax, cells, figures):
    """Per-call costs: grouped bars, one group per call figure (variants hatched)."""
    names = [f for f in figures if f.endswith("_us")]
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        xs, ys, el, eh = [], [], [], []
        for j, fig in enumerate(names):
            c = report.stats(cells.get((fig, "-", mode), []))
            if c.n:
                xs.append(j + (i - (len(MODES) - 1) / 2) * width)
                ys.append(c.med)
                el.append(c.med - c.lo)
                eh.append(c.hi - c.med)
        color, _m, label, ls = style(mode)
        if xs:
            ax.bar(xs, ys, width, yerr=[el, eh], color=color, label=label, capsize=2,
                   hatch="//" if ls == "--" else None, edgecolor="white" if ls == "--" else None)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n[:-3] for n in names], rotation=20, fontsize=8)
    ax.set_ylabel("us per call (lower is better)")
    ax.set_title("per-call costs", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def copies(axes, cells):
    """Bandwidth by size: HtoD and DtoH panels, pageable solid, pinned dashed, registered
    dotted (variants of mpsshim in their colours, so too)."""
    for ax, d in zip(axes, ("htod", "dtoh")):
        for kind, ls in (("pageable", "-"), ("pinned", "--"), ("registered", ":")):
            for mode in MODES:
                xs, ys, el, eh = series(cells, "copy_%s_%s_GBps" % (d, kind), mode)
                if not xs:
                    continue
                color, marker, label, _ls = style(mode)
                ax.errorbar(xs, ys, yerr=[el, eh], color=color, marker=marker, ls=ls,
                            label="%s, %s" % (label, kind), capsize=2, markersize=4)
        ax.set_xscale("log", base=2)
        ticks = sorted({x for (f, x, _m) in cells if f.startswith("copy_")}, key=report.xkey)
        ax.set_xticks([report.num(t) for t in ticks])
        ax.set_xticklabels([report.size_label(t).replace(" ", "") for t in ticks], rotation=45,
                           fontsize=7)
        ax.set_xlabel("copy size")
        ax.set_ylabel("GB/s (higher is better)")
        ax.set_title("%s bandwidth (synchronous copies)" % ("host to device" if d == "htod"
                                                            else "device to host"), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)


def sm_shares(ax, d):
    """bench/throttle.sh's times over T100, with the ideal share lines; False without it."""
    rows = report.read_tsv(os.path.join(d, "throttle-results.tsv"))
    if len(rows) < 2:
        return False
    head, body = rows[0], {r[0]: r[1:] for r in rows[1:]}
    want = [("b 25%: time / T100", "25% alone", 4.0),
            ("c 2x50%: time / T100, each", "2 x 50% at once", 2.0),
            ("d 50%+100%: 50% time/T100", "50% beside 100%", 2.0)]
    width = 0.12
    for i, mode in enumerate(head[1:]):
        key = {"native_mps": "mps"}.get(mode, mode)
        xs, ys = [], []
        for j, (row, _label, _ideal) in enumerate(want):
            for k, v in enumerate((body.get(row, [""] * 3)[i]).split()):
                val = report.num(v)
                if val is not None:
                    xs.append(j + (i - 1) * 0.3 + k * width)
                    ys.append(val)
        if xs:
            color, _m, label = STYLE.get(key, ("k", "o", mode))
            ax.bar(xs, ys, width, color=color, label=label)
    for j, (_row, _label, ideal) in enumerate(want):
        ax.hlines(ideal, j - 0.45, j + 0.45, colors="k", linestyles=":")
    ax.set_xticks(range(len(want)))
    ax.set_xticklabels([w[1] for w in want], fontsize=8)
    ax.set_ylabel("kernel time / one client's on the whole GPU")
    ax.set_title("SM shares (dotted: 1 / share); native has no shares", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return True


def stamp(figure, info):
    """The machine and run under every plot; a loud warning for the CPU test driver."""
    line = "%s, driver %s, %s, commit %s, %s repeats%s" % (
        info.get("gpu", "?"), info.get("driver", "?") or "?", info.get("date", "?"),
        info.get("commit", "?"), info.get("repeats", "?"),
        "" if info.get("run", "full") == "full" else ", QUICK run")
    figure.text(0.01, 0.005, line, fontsize=7, color="dimgray")
    if info.get("cpu_test_driver") == "1":
        figure.text(0.5, 0.5, "CPU TEST DRIVER\nnot GPU figures", fontsize=40, color="red",
                    alpha=0.25, ha="center", va="center", rotation=20)


def save(figure, info, d, name):
    stamp(figure, info)
    figure.tight_layout(rect=(0, 0.02, 1, 1))
    path = os.path.join(d, name)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def cold_title(name):
    """The title of a cold MPI figure (mpi_coldUS_s, mpi_coldUS_2gpu_s)."""
    us = name[len("mpi_cold"):].split("_")[0]
    return "cold MPI job, %s us kernels%s: slowest rank, first launch timed" % (
        us, ", ranks over 2 GPUs" if "_2gpu" in name else "")


def main(d):
    info, figures, cells = report.load(d)
    MODES[:] = report.all_modes(info, cells)
    out = []
    titles = {"overlap_s": ("overlap: slowest of N processes x 200 launches of 2 blocks x 100 us",
                            True),
              "mpi_gpu_loop_s": ("MPI job: slowest rank's GPU loop", True),
              "fleet_steps_per_s": ("PyTorch inference fleet: total steps/s", False),
              "fleetc_steps_per_s": ("driver-API fleet (fleetc): total steps/s", False)}
    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    for ax, name in zip(axes.flat, titles):
        scaling(ax, cells, figures, name, *titles[name])
    calls(axes.flat[4], cells, figures)
    cold = [f for f in ("mpi_cold75_s", "mpi_cold540_s", "mpi_cold75_2gpu_s")
            if any(k[0] == f for k in cells)]
    if cold:
        scaling(axes.flat[5], cells, figures, cold[0], cold_title(cold[0]), True)
    else:
        axes.flat[5].axis("off")
    out.append(save(fig, info, d, "scaling.png"))
    if cold:
        fig, axes = plt.subplots(1, len(cold), figsize=(6.5 * len(cold), 4.5), squeeze=False)
        for ax, name in zip(axes.flat, cold):
            scaling(ax, cells, figures, name, cold_title(name), True)
        out.append(save(fig, info, d, "mpi_cold.png"))
    for name, png in (("overlap_s", "overlap.png"), ("mpi_gpu_loop_s", "mpi.png"),
                      ("fleet_steps_per_s", "fleet.png"), ("fleetc_steps_per_s", "fleetc.png")):
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        scaling(ax, cells, figures, name, *titles[name])
        out.append(save(fig, info, d, png))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    calls(ax, cells, figures)
    out.append(save(fig, info, d, "calls.png"))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    copies(axes, cells)
    out.append(save(fig, info, d, "copy.png"))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if sm_shares(ax, d):
        out.append(save(fig, info, d, "sm_shares.png"))
    else:
        plt.close(fig)
    for p in out:
        print("wrote", p)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench/plot.py RESULTS_DIR")
    main(sys.argv[1])
