"""gapscope's own command process, tuned for analysing big traces: no NumPy huge-page requests, whose on-the-spot memory compaction doubled a big trace's analysis."""
from __future__ import annotations

import os

# A user's own setting (NumPy reads it at import) wins over ours.
NUMPY_SETTING = "NUMPY_MADVISE_HUGEPAGE"


def no_huge_page_stalls() -> None:
    """NumPy asks the kernel for transparent huge pages for every array of 4 MB or more
    (madvise), and where the kernel's THP defrag is `madvise` the first touch of such an array
    may compact memory there and then: on the 2-core VM (1 Dec 2026, defrag madvise) a 1,000-step
    800 MB trace's analysis after reading took 0.84-0.94 s with it and 0.42 s without, and its
    whole breakdown 3.56 s against 2.96 s (medians of 5, alternated), the reading unchanged.
    Only this process: it is set at run time, not in the environment, so a workload's run that
    gapscope starts keeps NumPy's default, as it would without gapscope."""
    if NUMPY_SETTING in os.environ:
        return
    from numpy._core import multiarray
    setter = getattr(multiarray, "_set_madvise_hugepage", None)  # NumPy's own switch (>= 1.19)
    if setter is not None:
        setter(False)
