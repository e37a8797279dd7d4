"""Where this gapscope was imported from: the folder that child processes put first on their path."""
from pathlib import Path

# This file's path as imported, not resolved: in a checkout profilers/ is linked into gapscope/ and
# the folder holding gapscope/ is the repository; in an installed wheel it is site-packages.
IMPORT_ROOT = Path(__file__).parents[2]
GAPSCOPE_PACKAGE = IMPORT_ROOT / "gapscope"
