#!/usr/bin/env python3
"""Where a request's time goes between a client's call and its reply: joins the notes of a
`make STAMPS=1` build (channel/stamp.h) and prints, for each operation, the medians of
each stage in microseconds.

usage: stamps.py [--gen BUILD/gen] [--skip N] DIR   (DIR: /tmp/mpsshim-stamps by default)

Stages (columns), a record at a time, by its position in its client's ring:
  begin  the client's request begun to published (the ring taken, the record written)
  see    published to taken by the server's worker (the worker's look at the ring)
  replay taken to the handler's return (the server's checks and its driver calls)
  reply  the handler's return to the client seeing its reply (for a synchronisation: the
         GPU's remaining work and its store; for a reply the worker posts: the post)
  all    begun to the reply seen (requests with a reply), or to the worker's return
and `idle`: between the worker's return from the record before (of the same client) and
its taking this one, when the record was published after that return (the worker waited
for it: the time it saw it late is `see`), else 0.

A process's connections (a second one to another GPU's server, or one made again) number
their rings' positions alike: their records are joined by the first seen at a position, so a
few early rows of such a process mix records (negative stages); --skip leaves them out.
"""
import argparse
import collections
import os
import re
import statistics
import struct
import sys

REC = struct.Struct("=QQIHH")
KINDS = ("begun", "sent", "answered", "taken", "replayed")


def op_names(gen):
    names = {}
    ids = os.path.join(gen, "shim_ids.h")
    ops = os.path.join(gen, "chan_ops.h")
    if os.path.exists(ids):
        for m in re.finditer(r"SHIM_ID_(\w+) = (\d+)", open(ids).read()):
            names[int(m.group(2))] = m.group(1)
    if os.path.exists(ops):
        n = None
        for line in open(ops):
            m = re.match(r"\s+CHAN_OP_(\w+)(?: = (0x[0-9a-f]+))?,", line)
            if not m:
                continue
            n = int(m.group(2), 16) if m.group(2) else n + 1
            names[n] = "op:" + m.group(1).lower()
    return names


def read(path, file_pid):
    data = open(path, "rb").read()
    out = []
    for i in range(len(data) // REC.size):
        ns, pos, pid, kind, op = REC.unpack_from(data, i * REC.size)
        if kind < 3:
            pid = file_pid  # a client notes 0: its file says who it is
        out.append((ns, pos, pid, kind, op))
    return out


def med(xs):
    return statistics.median(xs) / 1e3 if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", default="/tmp/mpsshim-stamps")
    ap.add_argument("--gen", default="build/gen")
    ap.add_argument("--skip", type=int, default=0, help="a client's first N records left out")
    a = ap.parse_args()
    recs = collections.defaultdict(dict)  # (pid, pos) -> kind -> (ns, op)
    for f in sorted(os.listdir(a.dir)):
        m = re.match(r"(\d+)\.bin$", f)
        if not m:
            continue
        for ns, pos, pid, kind, op in read(os.path.join(a.dir, f), int(m.group(1))):
            if kind < len(KINDS):
                # A position reused (a second connection, a move) keeps its first record.
                recs[(pid, pos)].setdefault(KINDS[kind], (ns, op))
    names = op_names(a.gen)
    stages = collections.defaultdict(lambda: collections.defaultdict(list))
    by_client = collections.defaultdict(list)
    for (pid, pos), k in recs.items():
        if "sent" in k and "taken" in k:
            by_client[pid].append((pos, k))
    for pid, lst in by_client.items():
        lst.sort()
        prev_done = None
        for i, (pos, k) in enumerate(lst):
            op = k["taken"][1]
            s = stages[names.get(op, str(op))]
            if i >= a.skip:
                if "begun" in k:
                    s["begin"].append(k["sent"][0] - k["begun"][0])
                s["see"].append(k["taken"][0] - k["sent"][0])
                if "replayed" in k:
                    s["replay"].append(k["replayed"][0] - k["taken"][0])
                    if "answered" in k:
                        s["reply"].append(k["answered"][0] - k["replayed"][0])
                if "begun" in k:
                    end = k.get("answered", k.get("replayed"))
                    if end:
                        s["all"].append(end[0] - k["begun"][0])
                s["idle"].append(
                    k["taken"][0] - prev_done if prev_done and k["sent"][0] >= prev_done else 0)
                s["n"].append(1)
            prev_done = k["replayed"][0] if "replayed" in k else None
    cols = ("begin", "see", "replay", "reply", "all", "idle")
    print("%-34s %7s " % ("operation", "n") + " ".join("%8s" % c for c in cols) + "   (medians, us)")
    for name, s in sorted(stages.items(), key=lambda kv: -len(kv[1]["n"])):
        if not s["n"]:
            continue
        print("%-34s %7d " % (name[:34], len(s["n"])) +
              " ".join("%8.3f" % med(s[c]) if s[c] else "%8s" % "-" for c in cols))
    if not stages:
        print("no record seen at both ends (a STAMPS=1 build at both?)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
