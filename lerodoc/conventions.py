"""lerobot's conventions that lerodoc takes as given, each spelt once.

This module imports nothing, so that `--help`, option defaults and finding a dataset by its info.json load no
format, media or table code.
"""

INFO_PATH = "meta/info.json"   # what makes a folder a LeRobot dataset, in every version
TOLERANCE_S = 1e-4             # lerobot's default tolerance_s: a query time must find a frame closer than this
WRITES = "v3.0"                # what every writing command writes unless told: lerobot 0.6.1's, the one it loads
