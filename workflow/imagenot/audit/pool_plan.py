"""Config lookups of the audit of the download pool (pure functions of the workflow config).

With ``audit.remove_flagged`` true, each audited dataset's download pool (every round's status
rows and part tars, the bytes its splits are built from) is audited before its splits are built
(rule ``audit_pool``, docs/audit.md "Removing flagged images"), and the fill and split of that
dataset (rule ``acquire_split``) reads the exclusion list it writes. Every input of the pool's
audit is built without the audited dataset: so that no rule waits on itself,
:func:`check` refuses an encoder trained on a dataset the removal rebuilds, and a dataset the
removal rebuilds is no other dataset's target set here.
"""

from __future__ import annotations

from imagenot.audit import plan as audit_plan
from imagenot.core import paths
from imagenot.diagnostics import plan as diagnostics_plan

POOL_EMBEDDINGS = f"{paths.RESULTS}/audit/{{dataset}}/pool/embeddings.npz"
EXCLUSIONS = f"{paths.RESULTS}/audit/{{dataset}}/pool/exclusions.parquet"


def removing(config: dict) -> list[str]:
    """The datasets whose flagged pool images are removed before their splits are built: every
    audited dataset when ``audit.remove_flagged`` is true, else none."""
    return (
        audit_plan.audited_datasets(config) if audit_plan.settings(config)["remove_flagged"] else []
    )


def check(config: dict) -> None:
    """Refuse, in one line naming the key, what would make a rule wait on its own output: an
    encoder trained on a dataset the removal rebuilds, or no calibration dataset built apart
    from it (the reference, ``diagnostics.reference_dataset``)."""
    rebuilt = removing(config)
    if not rebuilt:
        return
    run = diagnostics_plan.backbone_run(config)
    backbone = diagnostics_plan.settings(config)["encoder"]["kind"] == "backbone"
    if backbone and run is not None and run["dataset"] in rebuilt:
        raise ValueError(
            f"config key audit.remove_flagged: the encoder is a backbone trained on "
            f"{run['dataset']!r}, whose splits the removal builds after the audit; set "
            "diagnostics.encoder.backbone_dataset to another dataset, or kind clip"
        )
    reference = diagnostics_plan.reference_dataset(config)
    if reference is None or reference in rebuilt:
        raise ValueError(
            "config key audit.remove_flagged: the pool's threshold is calibrated on "
            "diagnostics.reference_dataset's images, which must be a configured dataset the "
            f"removal does not rebuild (it is {reference!r})"
        )


def target_sets(config: dict, dataset: str) -> list[tuple[str, str]]:
    """(dataset, split) the pool of ``dataset`` is compared with: the reference's
    ``audit.reference_splits``, then every other configured dataset's ``audit.other_split``
    but those the removal rebuilds (their splits wait for their own pool's audit)."""
    cfg = audit_plan.settings(config)
    reference = diagnostics_plan.reference_dataset(config)
    rebuilt = removing(config)
    out = [(reference, s) for s in cfg["reference_splits"]] if reference != dataset else []
    return out + [
        (name, cfg["other_split"])
        for name in config["datasets"]
        if name not in (dataset, reference) and name not in rebuilt
    ]


def target_labels(config: dict, dataset: str) -> list[str]:
    """``{dataset}/{split}`` of each target set, in :func:`target_sets` order."""
    return [f"{t}/{s}" for t, s in target_sets(config, dataset)]


def target_embeddings(config: dict, dataset: str) -> list[str]:
    return [diagnostics_plan.embeddings_file(t, s) for t, s in target_sets(config, dataset)]


def calibration(config: dict) -> str:
    """The threshold the pool is flagged at: the reference's calibration (the audited dataset
    is not built yet)."""
    return audit_plan.CALIBRATION.format(dataset=diagnostics_plan.reference_dataset(config))


def exclusions(config: dict, dataset: str) -> list[str]:
    """The exclusion list the fill and split of ``dataset`` reads: its pool's, where the
    removal rebuilds it, else none (the splits as published)."""
    check(config)
    return [EXCLUSIONS.format(dataset=dataset)] if dataset in removing(config) else []
