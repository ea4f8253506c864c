"""The preflight's feed checks (``imagenot.train.preflight``): per model, the real feed against
device-resident data, read where the training jobs will read.

* ``feed source (<side> px)``: where the jobs read a dataset. A sample is read cold (the page
  cache dropped) from the dataset's real location (``results/datasets/<name>``: a shared
  filesystem on most clusters; a sample of the dataset itself when it is built, else JPEGs
  written beside it) and from node-local ``$TMPDIR``, as ``train.stage_to_local`` would copy it;
  the check names the setting the measurement favours, and whether ``$TMPDIR`` has the room for
  the dataset (``feed.staging_room``, the check every job makes before it stages). What is
  measured is the jobs' reads, not JPEGs in a local temporary folder: the two differ by the
  whole cost of a shared filesystem. :func:`judge_source` decides on the measured rates
  (``Samples(measure=...)`` takes another measurement: given numbers, in the tests).
* ``feed <model>``: the real feed (``feed_bench.bench_model``) against the same images held on
  the device, reading them where the jobs will (node-local when they stage, else in place). On
  CUDA both ways of decoding are measured (the loader workers, and nvJPEG on the device ahead of
  the trainer: ``imagenot.train.decode``): the check passes when the way
  ``train.decode_on_gpu`` gives the model keeps up (ratio >= :data:`FEED_RATIO`), and otherwise
  names the change that the measurement says would (the model added to or removed from
  ``train.decode_on_gpu``, or the cores CPU decoding would need at the measured rate per
  worker).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from imagenot.core.dataset import DatasetError, ManifestDataset
from imagenot.train import feed_bench
from imagenot.train.experiments import decodes_on_gpu
from imagenot.train.feed import staging_room, tree_bytes
from imagenot.train.preflight_plan import Check
from imagenot.train.registry import input_size

FEED_RATIO = 0.9  # docs/gpu.md "Is the feed fast enough?"
# node-local reads this much faster than in place: staging pays (its copy is once per node and
# dataset version); slower than STAGE_LOSS of in place: staging costs
STAGE_GAIN = 1.25
STAGE_LOSS = 0.8


def drop_cache(root: Path) -> None:
    """Evict ``root``'s files from this node's page cache (``posix_fadvise`` DONTNEED; on NFS,
    Lustre and GPFS clients the same), so that the next read comes from their filesystem, as a
    job's first epoch does: a sample just written, or read by an earlier check, is otherwise
    read from memory."""
    for path in Path(root).rglob("*"):
        if not path.is_file():
            continue
        with contextlib.suppress(OSError, AttributeError):
            fd = os.open(path, os.O_RDONLY)
            with contextlib.suppress(OSError):
                os.fsync(fd)  # (written pages must be clean to be dropped)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def read_rate(dataset, readers: int) -> dict:
    """Images/s and MB/s of reading every item's bytes of ``dataset`` (``read_bytes``: the
    loader's pread and sha256 check, no decoding) with ``readers`` threads, as that many loader
    workers read."""
    n = len(dataset)
    start = time.perf_counter()
    with ThreadPoolExecutor(max(1, readers)) as pool:
        total = sum(pool.map(lambda i: len(dataset.read_bytes(i)), range(n)))
    seconds = max(time.perf_counter() - start, 1e-9)
    return {"img_per_s": round(n / seconds, 1), "mb_per_s": round(total / seconds / 1e6, 2)}


def judge_source(stage: bool, room: bool, gain: float) -> tuple[str, str, bool]:
    """The ``feed source`` check's verdict on measured read rates: (status, what it says,
    whether the jobs read the node-local copy). ``stage``: ``train.stage_to_local``; ``room``:
    whether ``$TMPDIR`` holds the dataset; ``gain``: node-local over in-place images/s."""
    if stage and not room:
        return "warn", "too little room, the jobs read in place (a larger $TMPDIR)", False
    if stage and gain < STAGE_LOSS:
        return "warn", "staging is slower here; set train.stage_to_local: false", True
    if not stage and gain >= STAGE_GAIN:
        return "warn", "set train.stage_to_local: true (the jobs read in place)", False
    return "pass", f"the jobs read {'a node-local copy' if stage else 'in place'}", stage


def _remove_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


class Samples(contextlib.ExitStack):
    """The feed checks' images per stored side, read where the jobs read (module docstring);
    a context: the samples it writes (and the folders it made for them) are removed at its end. ``checks`` collects the ``feed
    source`` checks, one per side. ``measure(dataset,
    readers)``: a dataset's read rate (:func:`read_rate`'s ``img_per_s`` and ``mb_per_s``),
    taken cold in place and in ``$TMPDIR``."""

    def __init__(self, settings, feed_images: int, readers: int, device: torch.device,
                 datasets_root: str | None = None, measure=read_rate):  # fmt: skip
        super().__init__()
        dirs = {name: Path(d) for name, d in settings.dataset_dirs.items()}
        if datasets_root is not None:  # the datasets' folder moved (tests, gpu_check)
            dirs = {name: Path(datasets_root) / name for name in dirs}
        self.dirs = dirs
        self.beside = next(iter(dirs.values())).parent if dirs else Path("results/datasets")
        self.stage = settings.stage_to_local
        self.feed_images, self.readers, self.device = feed_images, readers, device
        self.measure = measure
        self.local_root = os.environ.get("TMPDIR")
        self.data: dict[int, object] = {}
        self.checks: list = []

    def _made(self, path: Path) -> Path:
        self.callback(shutil.rmtree, path, ignore_errors=True)
        return path

    def _real(self, side: int):
        """(sample, where, the dataset's folder or None) at the jobs' location: a sample of a
        built dataset stored at ``side``, else JPEGs written beside the datasets."""
        for name, folder in self.dirs.items():
            with contextlib.suppress(DatasetError, OSError, ValueError, IndexError):
                dataset = ManifestDataset(folder, "train")
                if len(dataset) and dataset.image_shape(0)[1:] == (side, side):
                    return feed_bench.Sample(dataset, self.feed_images), f"dataset {name}", folder
        for made in [d for d in (self.beside, *self.beside.parents) if not d.exists()][::-1]:
            self.callback(_remove_empty, made)  # at the end, after the samples (deepest first)
        self.beside.mkdir(parents=True, exist_ok=True)
        root = self._made(self.beside / f".preflight-sample-{os.getpid()}-{side}")
        sample = feed_bench.write_jpeg_dataset(root, self.feed_images, side)
        return sample, f"a sample written beside the datasets ({self.beside})", None

    def _local_copy(self, sample, side: int) -> feed_bench.ManifestDataset:
        """The sample's images written as a dataset under ``$TMPDIR``, as a staged copy."""
        root = self._made(Path(self.local_root) / f"imagenot-preflight-{os.getpid()}-{side}")
        jpegs = [sample.read_bytes(i) for i in range(len(sample))]
        return feed_bench.write_jpegs(root, jpegs, list(sample.labels), 0)

    def get(self, side: int) -> tuple:
        """(the dataset the feed check reads, its images held on the device) for ``side``: the
        source measured once per side, the images put on the device anew for each caller (who
        lets them go after its check: no model's memory check runs beside another's images)."""
        if side not in self.data:
            self.data[side], check = self._measure(side)
            self.checks.append(check)
        feed_from = self.data[side]
        return feed_from, feed_bench.resident(feed_from, self.device)

    def _measure(self, side: int):
        sample, where, folder = self._real(side)
        sample_root = getattr(getattr(sample, "dataset", sample), "dataset_dir", None)
        drop_cache(folder or sample_root)
        real = self.measure(sample, self.readers)
        values = {"where": where, "real": real, "stage_to_local": self.stage}
        name = f"feed source ({side} px)"
        head = f"{where}: {real['img_per_s']} img/s ({real['mb_per_s']} MB/s) read cold"
        if not self.local_root:
            detail = f"{head}; no $TMPDIR on this node, the jobs read in place"
            status = "warn" if self.stage else "pass"
            if self.stage:
                detail += " (train.stage_to_local is on: set $TMPDIR in the site's job environment)"
            return sample, Check(name, status, detail, values)
        local_root = Path(self.local_root)
        local = self._local_copy(sample, side)
        drop_cache(local.dataset_dir)
        fast = self.measure(local, self.readers)
        values["local"] = fast
        need = tree_bytes(folder) if folder is not None else None
        room, free = staging_room(need or 0, local_root)
        values |= {"tmpdir_free_gb": round(free / 1e9, 1),
                   "dataset_gb": None if need is None else round(need / 1e9, 4)}  # fmt: skip
        gain = fast["img_per_s"] / max(real["img_per_s"], 1e-9)
        values["local_over_real"] = round(gain, 2)
        head += f"; node-local $TMPDIR {fast['img_per_s']} img/s (x{gain:.2f})"
        with contextlib.suppress(OSError):
            if os.stat(local_root).st_dev == os.stat(sample_root or folder).st_dev:
                head += " (the same filesystem)"
        if need is None:
            head += f"; $TMPDIR has {free / 1e9:.0f} GB free (the dataset is not built yet: "
            head += "each job checks the room before it stages)"
        else:
            head += f"; $TMPDIR has {free / 1e9:.0f} GB free for the dataset's {need / 1e9:.1f} GB"
        status, says, staged = judge_source(self.stage, room, gain)
        values["jobs_read"] = "node-local copy" if staged else "in place"
        detail = f"{head}{': ' if status == 'warn' else '; '}{says}"
        return (local if staged else sample), Check(name, status, detail, values)


def check_feed(
    run: dict,
    settings,
    workers: int,
    data,
    device: torch.device,
    options,
    root: Path,
    num_classes: int,
) -> Check:
    """The real feed against device-resident data for ``run`` (its stored size and batch),
    both ways of decoding on CUDA (``options.both_decoders`` on the CPU too); skipped when the
    device runs out of memory (its memory check says why)."""
    name = f"feed {run['model']} ({run['stored_size']} px stored)"
    dataset, on_device = data
    on_gpu = decodes_on_gpu(settings.decode_on_gpu, run["model"])
    both = options.both_decoders if options.both_decoders is not None else device.type == "cuda"
    try:
        row = feed_bench.bench_model(
            run["model"],
            dataset,
            on_device,
            batch=run["per_gpu"],
            size=input_size(run["model"], settings.image_size),  # the model's input side
            normalisation=run["normalisation"],
            steps=options.feed_steps,
            warmup=options.feed_warmup,
            workers=workers,
            encoded=on_gpu and (device.type == "cuda" or both),
            num_classes=num_classes,
            device=device,
            root=root,
            both=both,
            seconds=options.feed_seconds,
        )
    except torch.OutOfMemoryError:
        return Check(name, "skip", "out of device memory at this batch: see its memory check")
    finally:
        release()
    way = "decoded on the GPU" if on_gpu else f"{workers} CPU workers"
    detail = (
        f"{row['feed_img_per_s']} img/s fed ({way}), {row['device_img_per_s']} from device "
        f"memory: ratio {row['ratio']} (batch {run['per_gpu']})"
    )
    cpu, gpu = row.get("cpu_decode_img_per_s"), row.get("gpu_decode_img_per_s")
    if cpu is not None and workers:
        row["cpu_img_per_s_per_worker"] = round(cpu / workers, 1)
        need = FEED_RATIO * row["device_img_per_s"] / max(cpu / workers, 1e-9)
        row["workers_needed"] = math.ceil(need)
    if both:
        detail += (
            f"; CPU workers {cpu} img/s (ratio {row['cpu_decode_ratio']}), GPU decoding {gpu} "
            f"img/s (ratio {row['gpu_decode_ratio']})"
        )
    if device.type != "cuda":
        why = "not judged on the CPU (model and workers share cores)"
        return Check(name, "info", f"{detail}; {why}", row)
    if row["ratio"] >= FEED_RATIO:
        return Check(name, "pass", detail, row)
    model = run["model"]
    if on_gpu and row.get("cpu_decode_ratio", 0) >= FEED_RATIO:
        fix = f"the CPU workers keep up: remove {model} from train.decode_on_gpu"
    elif not on_gpu and row.get("gpu_decode_ratio", 0) >= FEED_RATIO:
        fix = f"GPU decoding keeps up: add {model} to train.decode_on_gpu"
    elif "workers_needed" in row:
        fix = (
            f"neither way keeps up; CPU decoding at the measured "
            f"{row['cpu_img_per_s_per_worker']} img/s per worker would need about "
            f"{row['workers_needed']} workers (resources.cpus_per_gpu: "
            f"{row['workers_needed'] + 1})"
        )
    else:
        fix = "raise resources.cpus_per_gpu (more loader workers)"
    return Check(name, "warn", f"{detail}: the GPU waits on the feed; {fix}", row)


def release() -> None:
    """Give the device's cached memory back (between the preflight's measured checks)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
