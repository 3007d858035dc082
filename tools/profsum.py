#!/usr/bin/env python3
"""profsum.py DIR [--top N] [--from NS --to NS]: where the CPU time went, from the samples
tools/libprofsample.so wrote into DIR (PID.ips, PID.maps).

Processes are grouped by kind: `server` (an mpsshim-server), `mps-server`, and `client` (any
other but mpsshim-control). For each kind: the share of samples per library, per function,
and for samples in a lock, a system call or a spin (WAIT_LEAVES) the callers that led there
(the frame-pointer chain the sampler followed; after a leaf that keeps no frame, as libc's
system-call wrappers, the chain starts at its caller's caller). Only samples inside the window count: --from
and --to (CLOCK_MONOTONIC ns), else the window every DIR/out.* file's `# window_s T0 T1` line
gives (bench/fleet.py's), their intersection; else all.

Functions come from `nm` run on each mapped file (its symbol table, else its dynamic one), or
from DIR/nm/BASENAME.txt where that file is (nm's output, made where the binaries are). A
stripped library (the driver's) shows only its exported names, so its rows say which library
rather than which function."""
import argparse
import bisect
import collections
import glob
import os
import shutil
import subprocess
import sys

WAIT_LEAVES = ('syscall', '__lll_lock_wait_private', '__lll_lock_wake_private',
               '__lll_lock_wait', 'pthread_mutex_lock', 'pthread_mutex_unlock', 'sched_yield',
               'pthread_rwlock_rdlock', 'pthread_rwlock_wrlock', 'pthread_rwlock_unlock',
               'chan_wait_for', 'chan_cpu_relax')


def window(d):
    """The fleet's common measuring window in ns, from out.* files, or None."""
    lo, hi = None, None
    for f in glob.glob(os.path.join(d, 'out.*')):
        with open(f, errors='replace') as fh:
            for line in fh:
                w = line.split()
                if len(w) >= 4 and w[0] == '#' and w[1] == 'window_s':
                    a, b = float(w[2]) * 1e9, float(w[3]) * 1e9
                    lo = a if lo is None else max(lo, a)
                    hi = b if hi is None else min(hi, b)
    return (lo, hi) if lo is not None and hi > lo else None


class Symbols:
    """Function names by file offset, per mapped file (nm's addresses are the offsets in the
    shared objects and position-independent programs built here and on Ubuntu)."""

    def __init__(self, d):
        self.d = d
        self.tables = {}
        self.nm = shutil.which('nm')

    def _load(self, path):
        base = os.path.basename(path)
        text = ''
        pre = os.path.join(self.d, 'nm', base + '.txt')
        if os.path.exists(pre):
            with open(pre, errors='replace') as fh:
                text = fh.read()
        elif self.nm and os.path.exists(path):
            for args in (['--defined-only'], ['-D', '--defined-only']):
                r = subprocess.run([self.nm] + args + [path], capture_output=True, text=True)
                if r.returncode == 0 and r.stdout.strip():
                    text = r.stdout
                    break
        table = []
        for line in text.splitlines():
            w = line.split()
            if len(w) >= 3 and w[1] in 'tTwWiI':
                try:
                    table.append((int(w[0], 16), w[2].split('@')[0]))
                except ValueError:
                    pass
        table.sort()
        return table

    def name(self, path, off):
        if path not in self.tables:
            self.tables[path] = self._load(path)
        t = self.tables[path]
        j = bisect.bisect_right(t, (off, '\U0010ffff')) - 1
        return t[j][1] if j >= 0 else '?'


def read_maps(path):
    maps = []
    with open(path, errors='replace') as fh:
        for line in fh:
            w = line.split()
            if len(w) < 5:
                continue
            lo, hi = (int(v, 16) for v in w[0].split('-'))
            maps.append((lo, hi, int(w[2], 16), w[5] if len(w) > 5 else '[anon]'))
    maps.sort()
    return maps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('dir')
    ap.add_argument('--top', type=int, default=20)
    ap.add_argument('--from', dest='t0', type=float)
    ap.add_argument('--to', dest='t1', type=float)
    a = ap.parse_args()
    win = (a.t0, a.t1) if a.t0 is not None and a.t1 is not None else window(a.dir)
    syms = Symbols(a.dir)
    total = collections.Counter()
    procs = collections.Counter()
    libs = collections.defaultdict(collections.Counter)
    funcs = collections.defaultdict(collections.Counter)
    waits = collections.defaultdict(collections.Counter)
    for f in sorted(glob.glob(os.path.join(a.dir, '*.ips'))):
        pid = os.path.basename(f)[:-4]
        mpath = os.path.join(a.dir, pid + '.maps')
        if not os.path.exists(mpath):
            continue
        maps = read_maps(mpath)
        paths = {m[3] for m in maps}
        if any(p.endswith('/mpsshim-control') for p in paths):
            continue
        kind = ('server' if any(p.endswith('/mpsshim-server') for p in paths) else
                'mps-server' if any(p.endswith('nvidia-cuda-mps-server') for p in paths) else
                'client')
        los = [m[0] for m in maps]
        counted = 0

        def where(ip):
            i = bisect.bisect_right(los, ip) - 1
            if i < 0 or ip >= maps[i][1]:
                return '[unknown]', '?'
            m = maps[i]
            return os.path.basename(m[3]), syms.name(m[3], ip - m[0] + m[2])

        with open(f) as fh:
            for line in fh:
                w = line.split()
                if len(w) < 3:
                    continue
                t = int(w[1])
                if win and not win[0] <= t <= win[1]:
                    continue
                lib, fn = where(int(w[0], 16))
                counted += 1
                total[kind] += 1
                libs[kind][lib] += 1
                funcs[kind][lib + ':' + fn] += 1
                if fn in WAIT_LEAVES:
                    chain = [fn] + ['%s:%s' % where(int(x, 16)) for x in w[3:] if x != '0']
                    waits[kind][' <- '.join(chain[:5])] += 1
        procs[kind] += counted > 0
    if not total:
        print('profsum: no samples%s in %s' % (' in the window' if win else '', a.dir))
        return 1
    print('window: %s' % ('%.3f-%.3f s (CLOCK_MONOTONIC)' % (win[0] / 1e9, win[1] / 1e9)
                          if win else 'all samples'))
    for kind in sorted(total):
        n = total[kind]
        print('%s: %d processes, %d samples' % (kind, procs[kind], n))
        print('  by library:')
        for k, v in libs[kind].most_common(a.top):
            print('    %5.1f%%  %s' % (100.0 * v / n, k))
        print('  by function:')
        for k, v in funcs[kind].most_common(a.top):
            print('    %5.1f%%  %s' % (100.0 * v / n, k))
        if waits[kind]:
            print('  locks, system calls and spins, with their callers:')
            for k, v in waits[kind].most_common(a.top):
                print('    %5.1f%%  %s' % (100.0 * v / n, k))
    return 0


if __name__ == '__main__':
    sys.exit(main())
