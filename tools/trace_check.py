#!/usr/bin/env python3
"""Checks a GPU timeline written by `trace stop` (server/control/trace.c): the file is JSON, the
records meet the expectations given, and the summary in its metadata is what the records
say (each owner's busy time is the union of its intervals, the part beside other clients'
is recomputed here, and the whole adds up). Prints each thing that does not hold; exit 1
then. Used by tests/trace.sh (CPU test driver) and tests/gpu_trace.sh (a GPU).

usage: trace_check.py FILE [EXPECTATION...]
  PID:NAME:COUNT      exactly COUNT records whose name starts with NAME under client PID
  exe:EXE:NAME:MIN    at least one client runs EXE, and each has MIN or more such records
  unit                the file of tests/unit/trace_test (its odd kernel name came through)
  empty               no record at all
"""
import json
import sys


def union(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(u):
    return sum(e - s for s, e in u)


def meet(a, b):
    """Length of the intersection of two unions."""
    i = j = 0
    t = 0.0
    while i < len(a) and j < len(b):
        t += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return t


def check(path, want):
    bad = []
    d = json.load(open(path))
    evs = [e for e in d["traceEvents"] if e["ph"] == "X"]
    meta = d["metadata"]["mpsshim"]
    owners = {o["pid"]: o for o in meta["owners"]}
    for w in want:
        if w == "empty":
            if evs:
                bad.append("%d records in a trace of nothing" % len(evs))
        elif w == "unit":
            got = [e["name"] for e in evs]
            if 'we"ird\\name\n\xff' not in got or "HtoD 0 B" not in got:
                bad.append("names did not come through: %r" % got)
        elif w.startswith("exe:"):
            _, exe, name, least = w.split(":")
            pids = [p for p, o in owners.items() if o["client"] and o["exe"] == exe]
            if not pids:
                bad.append("no client runs %s" % exe)
            for p in pids:
                n = sum(1 for e in evs if e["pid"] == p and e["name"].startswith(name))
                if n < int(least):
                    bad.append("client %d (%s) has %d records named %s*, fewer than %s"
                               % (p, exe, n, name, least))
        else:
            pid, name, count = w.split(":")
            n = sum(1 for e in evs if e["pid"] == int(pid) and e["name"].startswith(name))
            if n != int(count):
                bad.append("pid %s has %d records named %s*, not %s" % (pid, n, name, count))
            if int(pid) not in owners or not owners[int(pid)]["client"]:
                bad.append("pid %s is not a client in the summary" % pid)

    work = [e for e in evs if e["cat"] != "sync"]
    per = {}
    for e in work:
        per.setdefault(e["pid"], []).append((e["ts"], e["ts"] + e["dur"]))
    clients = [p for p in owners if owners[p]["client"]]
    eps = 0.002  # microseconds: the file has three decimals; allowed per interval
    for p, o in owners.items():
        u = union(per.get(p, []))
        others = union([iv for q in clients if q != p for iv in per.get(q, [])])
        busy, beside = length(u), meet(u, others)
        tol = eps * (2 + len(u) + len(others))
        if abs(busy - o["busy_us"]) > tol or abs(beside - o["beside_us"]) > tol:
            bad.append("pid %d: busy %.3f, beside others %.3f in the records; the summary says "
                       "%.3f, %.3f" % (p, busy, beside, o["busy_us"], o["beside_us"]))
        if o["beside_us"] > o["busy_us"] + tol or o["busy_us"] > meta["window_us"] + tol:
            bad.append("pid %d: beside %.3f, busy %.3f, window %.3f do not nest"
                       % (p, o["beside_us"], o["busy_us"], meta["window_us"]))
        if o["records"] != len(per.get(p, [])):
            bad.append("pid %d: %d records in the summary, %d in the file"
                       % (p, o["records"], len(per.get(p, []))))
    a = meta["all"]
    tol = eps * (2 + len(work))
    allu = union([iv for q in per for iv in per[q]])
    if abs(length(allu) - a["union_us"]) > tol:
        bad.append("any work %.3f in the records, %.3f in the summary" % (length(allu), a["union_us"]))
    if abs(sum(owners[p]["busy_us"] for p in clients) - a["sum_us"]) > tol:
        bad.append("the clients' busy times do not add up to the summary's sum")
    server = sum(o["busy_us"] for o in owners.values() if not o["client"])
    if a["multi_us"] > a["union_us"] + tol or a["union_us"] > a["sum_us"] + server + tol:
        bad.append("two or more %.3f, any %.3f, sum %.3f do not nest"
                   % (a["multi_us"], a["union_us"], a["sum_us"]))
    if meta["records"] != len(evs):
        bad.append("%d records said, %d in the file" % (meta["records"], len(evs)))
    return bad


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bad = check(sys.argv[1], sys.argv[2:])
    for b in bad:
        print("FAIL: %s: %s" % (sys.argv[1], b))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
