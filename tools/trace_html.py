#!/usr/bin/env python3
"""Draws a GPU timeline written by `trace stop` (server/control/trace.c) as one self-contained HTML
page (an SVG and the summary table): for a browser with no way to Perfetto's web UI, such as
a headless Chromium taking a screenshot on a machine without a network:

    tools/trace_html.py trace.json trace.html
    chromium --headless --screenshot=trace.png --window-size=1600,1000 file://$PWD/trace.html

A row per stream, grouped by client; each client in a colour of its own; at the top, how
many clients had GPU work at each moment. Records closer than a pixel are drawn as one.
"""
import html
import json
import sys

WIDTH = 1400  # pixels of time
LABEL = 330   # pixels of row labels
ROW = 16
GAP = 6


def colour(i, n):
    return "hsl(%d,65%%,48%%)" % (int(360 * i / max(n, 1)) % 360)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d = json.load(open(sys.argv[1]))
    meta = d.get("metadata", {}).get("mpsshim", {})
    window = max(float(meta.get("window_us", 0)), 1.0)
    procs, threads, rows = {}, {}, {}
    for e in d["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["ph"] == "X":
            rows.setdefault((e["pid"], e["tid"]), []).append(e)
            window = max(window, e["ts"] + e["dur"])
    owners = {o["pid"]: o for o in meta.get("owners", [])}
    clients = sorted(p for p in procs if owners.get(p, {}).get("client", True))
    order = clients + sorted(p for p in procs if p not in clients)
    hue = {p: colour(i, len(clients)) for i, p in enumerate(clients)}
    scale = WIDTH / window

    def px(us):
        return LABEL + us * scale

    # Clients with work at each pixel column (a client counts in a column it touches).
    cols = [set() for _ in range(WIDTH + 1)]
    for (pid, tid), evs in rows.items():
        if pid not in clients:
            continue
        for e in evs:
            if e["cat"] == "sync":
                continue
            a = int(e["ts"] * scale)
            b = int((e["ts"] + e["dur"]) * scale)
            for c in range(max(a, 0), min(b, WIDTH) + 1):
                cols[c].add(pid)
    most = max([len(c) for c in cols] + [1])
    busy_h = 60
    out = []
    y = 40
    out.append('<text x="4" y="%d" class="l">clients with GPU work (0 to %d)</text>' % (y + busy_h / 2, most))
    pts = ["%d,%d" % (LABEL, y + busy_h)]
    for c in range(WIDTH + 1):
        h = busy_h * len(cols[c]) / most
        pts.append("%.1f,%.1f %.1f,%.1f" % (LABEL + c, y + busy_h - h, LABEL + c + 1, y + busy_h - h))
    pts.append("%d,%d" % (LABEL + WIDTH + 1, y + busy_h))
    out.append('<polygon points="%s" fill="#4a6fa5" opacity="0.8"/>' % " ".join(pts))
    for k in range(1, most + 1):
        yy = y + busy_h - busy_h * k / most
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ccc" stroke-dasharray="2,3"/>'
                   % (LABEL, LABEL + WIDTH, yy, yy))
    y += busy_h + 2 * GAP
    for pid in order:
        tids = sorted(t for (p, t) in set(rows) | set(threads) if p == pid and (p, t) in rows)
        if not tids:
            continue
        out.append('<text x="4" y="%d" class="p">%s</text>' % (y + 12, html.escape(procs.get(pid, str(pid)))))
        y += ROW + 2
        for tid in tids:
            evs = sorted(rows[(pid, tid)], key=lambda e: e["ts"])
            name = threads.get((pid, tid), "tid %d" % tid)
            out.append('<text x="14" y="%d" class="l">%s</text>' % (y + 11, html.escape(name[:48])))
            out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#eee"/>'
                       % (LABEL, LABEL + WIDTH, y + ROW - 1, y + ROW - 1))
            fill = hue.get(pid, "#888")
            i = 0
            while i < len(evs):
                e = evs[i]
                a, b = px(e["ts"]), px(e["ts"] + e["dur"])
                j = i + 1
                while j < len(evs) and px(evs[j]["ts"]) <= b + 1:
                    b = max(b, px(evs[j]["ts"] + evs[j]["dur"]))
                    j += 1
                if j - i == 1:
                    tip = "%s: %.3f ms at %.3f ms" % (e["name"], e["dur"] / 1000, e["ts"] / 1000)
                else:
                    tip = "%d records from %.3f ms" % (j - i, e["ts"] / 1000)
                f = "#999" if e["cat"] == "sync" else fill
                out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>'
                           % (a, y + 2, max(b - a, 1.0), ROW - 4, f, html.escape(tip)))
                i = j
            y += ROW
        y += GAP
    # The time axis.
    step = 10 ** max(0, len(str(int(window / 10))) - 1)
    while window / step > 12:
        step *= 2
    t = 0.0
    ticks = []
    while t <= window:
        ticks.append('<line x1="%.1f" x2="%.1f" y1="30" y2="%d" stroke="#ddd"/>'
                     '<text x="%.1f" y="24" class="t">%g ms</text>' % (px(t), px(t), y, px(t) + 2, t / 1000))
        t += step
    height = y + 10
    table = ["<tr><th>pid</th><th>program</th><th>GPU busy (ms)</th><th>beside other clients (ms)</th>"
             "<th>share</th><th>records</th></tr>"]
    for o in meta.get("owners", []):
        if not o["client"] and not o["records"]:
            continue  # the server's own streams ran nothing
        share = "%d%%" % (100 * o["beside_us"] / o["busy_us"]) if o["busy_us"] else "-"
        sw = '<span style="color:%s">&#9632;</span> ' % hue[o["pid"]] if o["pid"] in hue else ""
        table.append("<tr><td>%d</td><td>%s%s</td><td>%.3f</td><td>%.3f</td><td>%s</td><td>%d</td></tr>"
                     % (o["pid"], sw, html.escape(o["exe"] if o["client"] else "mpsshim-server (own streams)"),
                        o["busy_us"] / 1000, o["beside_us"] / 1000, share, o["records"]))
    a = meta.get("all", {})
    whole = ""
    if a:
        whole = ("Any GPU work %.3f ms; two or more clients at once %.3f ms; the clients' busy times add up "
                 "to %.3f ms (%.2fx)" % (a["union_us"] / 1000, a["multi_us"] / 1000, a["sum_us"] / 1000,
                                         a["sum_us"] / a["union_us"] if a["union_us"] else 0))
    page = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>mpsshim GPU timeline</title>
<style>body{font:13px sans-serif;margin:12px} .p{font:bold 12px sans-serif} .l{font:11px monospace}
.t{font:10px sans-serif;fill:#666} table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right} td:nth-child(2){text-align:left}</style>
</head><body><h3>mpsshim GPU timeline: server %s, %.3f ms, %s records (%s dropped, %s incomplete)</h3>
<table>%s</table><p>%s</p>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">%s%s</svg></body></html>
""" % (meta.get("server_pid", "?"), float(meta.get("window_us", 0)) / 1000, meta.get("records", "?"),
       meta.get("dropped", "?"), meta.get("incomplete", "?"), "".join(table), whole,
       LABEL + WIDTH + 20, height, "".join(ticks), "".join(out))
    open(sys.argv[2], "w").write(page)


if __name__ == "__main__":
    main()
