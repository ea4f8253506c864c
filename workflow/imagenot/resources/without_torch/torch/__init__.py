"""Not torch: a stand-in that a download's processes find first on their path
(imagenot.acquire.fetch.WITHOUT_TORCH), so that ``import torch`` fails there at once.

Why: img2dataset imports webdataset, which imports torch when it can, for torch dataset classes a
download never uses; webdataset falls back to its own stand-ins when the import fails. Importing
torch was about 2.5 of the 4.2 CPU-s each process of a download spends starting (the fetch child,
img2dataset's spawned workers and its logger process, which take their path from the fetch
child). Nothing else puts this folder on a path.
"""

raise ModuleNotFoundError(
    "torch is not imported in a download's processes (imagenot.acquire.fetch)", name="torch"
)
