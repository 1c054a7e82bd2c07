"""training.memory: with the freed memory kept, a large tensor allocated where a freed one fits
touches no new pages (minor page faults counted in a fresh process); with glibc's defaults every
page faults again."""

import json
import platform
import subprocess
import sys

import pytest

SCRIPT = """
import json, resource, sys
import torch
from training.memory import reuse_freed_memory
active = reuse_freed_memory() if sys.argv[1] == "reuse" else False
faults = []
for step in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.ones(2 ** 25 - 1024 * step)  # 128 MiB (above glibc's mmap threshold), each fitting the last
    del t
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"active": active, "faults": faults}))
"""

PAGES = 2 ** 27 // 4096  # pages of one tensor


def run(allocator: str) -> dict:
    result = subprocess.run([sys.executable, "-c", SCRIPT, allocator], capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="training.memory tunes glibc's allocator only")
def test_freed_memory_is_reused_without_page_faults():
    system, reuse = run("system"), run("reuse")
    assert reuse["active"] and not system["active"]
    assert min(system["faults"]) > PAGES * 0.9                           # every time, every page
    assert reuse["faults"][0] > PAGES * 0.9 and max(reuse["faults"][1:]) < PAGES // 100
