#!/usr/bin/env python3
"""Counts the returns of a walk: a walk file lists, one a line, 'file | what runs there',
in the order the walk visits them ('# ...' lines are segment titles). Consecutive visits to
one file are one; a return is a visit to a file the walk already left. Method A counts
every file of the module; method B only the walk's own packages (WALKS), the other files'
visits dropped first. Usage: count.py job|payout WALK-FILE..."""
import sys
WALKS = {
    # the walk's own packages: its CLI, API and subsystem, and the package's own files of
    # node/ (and ledger/ for a payout)
    'job': (('cmd/gpunex/', 'node/api/', 'node/internal/jobs/'), ('node/',)),
    'payout': (('cmd/gpunex/', 'node/api/', 'node/internal/money/'), ('node/', 'ledger/')),
}
def owner(walk):
    prefixes, top = WALKS[walk]
    return lambda f: f.startswith(prefixes) or (f.startswith(top) and f.count('/') == 1)
def count(path, keep):
    seq = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        f = line.split('|')[0].strip()
        if keep(f) and (not seq or seq[-1] != f):
            seq.append(f)
    seen, returns = set(), 0
    for f in seq:
        if f in seen:
            returns += 1
        seen.add(f)
    return returns, len(seen), len(seq)
walk = sys.argv[1]
for p in sys.argv[2:]:
    a = count(p, lambda f: True)
    b = count(p, owner(walk))
    print(f"{p}: A (every module file): {a[0]} returns over {a[1]} files ({a[2]} visits); B (the walk's own packages): {b[0]} returns over {b[1]} files ({b[2]} visits)")
