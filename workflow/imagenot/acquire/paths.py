"""Where acquisition writes, written once: download parts and rounds, the fill-and-split plan,
its reports and the part manifests (rules/acquire.smk, :mod:`imagenot.acquire.plan`; the run
summary reads the download report). The materialised dataset itself is laid out in
:mod:`imagenot.core.paths`, which its readers share. Snakemake patterns, one per file.
"""

from __future__ import annotations

from imagenot.core.paths import RESULTS

ACQUIRE = f"{RESULTS}/acquire/{{dataset}}"
# download round 0 in the acquire folder itself (its paths predate top-up rounds), round r >= 1
# in round-{r}/: the same files below each
ROUND = f"{ACQUIRE}/round-{{round}}"
_PART = "parts/part-{part}"
_WORK = "work/part-{part}"  # img2dataset's resumable work folder (kept, not an output)
PART_STATUS = f"{ACQUIRE}/{_PART}.parquet"
PART_TAR = f"{ACQUIRE}/{_PART}.tar"
PART_WORK = f"{ACQUIRE}/{_WORK}"
ROUND_SELECTION = f"{ROUND}/selection.parquet"
ROUND_PART_STATUS = f"{ROUND}/{_PART}.parquet"
ROUND_PART_TAR = f"{ROUND}/{_PART}.tar"
ROUND_PART_WORK = f"{ROUND}/{_WORK}"
ASSIGNMENT = f"{ACQUIRE}/assignment.parquet"
DOWNLOAD_STATS = f"{ACQUIRE}/download_stats.parquet"
DOWNLOAD_STATS_CSV = f"{ACQUIRE}/download_stats.csv"
CLASSES_REPORT = f"{ACQUIRE}/classes_report.parquet"
CLASSES_REPORT_CSV = f"{ACQUIRE}/classes_report.csv"
WRITE_PART = f"{ACQUIRE}/write/part-{{part}}.parquet"
RANGE_PART = f"{ACQUIRE}/ranges/range-{{job}}.parquet"
