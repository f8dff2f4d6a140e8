"""Attack code the red-team tests share: Python source, data built here, that a scripted agent runs as
``python3 -c`` inside the test's temporary project (never through a shell line of the tests' own)."""

from __future__ import annotations

# The ref named in argv[1] (JSON), a loose ref file of the common git dir (a linked worktree's too), rewritten in
# place to an unrelated commit with its size and mtime kept; the new tip goes to moved.flag.
MOVE_REF_IN_PLACE = """
import json, os, subprocess, sys
ref = json.loads(sys.argv[1])
common = subprocess.run(['git', 'rev-parse', '--git-common-dir'], capture_output=True, text=True, check=True).stdout.strip()
path = os.path.join(common, *ref.split('/'))
other = subprocess.run(['git', 'commit-tree', 'HEAD^{tree}', '-m', 'elsewhere'],
                       capture_output=True, text=True, check=True).stdout.strip()
before = os.stat(path)
with open(path, 'r+') as handle:
    handle.write(other + '\\n')
os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
open('moved.flag', 'w').write(other)
"""

# Spliced into a daemon's source (after ``import os, sys``): double-fork, setsid, stdio closed, so the rest runs
# in a process that has left the agent's session and the tool call returns at once.
DETACH = """
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
for fd in (0, 1, 2):
    try:
        os.close(fd)
    except OSError:
        pass
"""
