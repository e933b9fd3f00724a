"""Finished seeds of a recipe: reused as they are, never relaunched.

A seed folder whose trainer ended training exactly the run this recipe would start there is finished: its
summary.json is the result. Relaunching it with --resume would train no step, yet rewrite last.pt,
summary.json and config.json, so a rerun of a finished recipe would not be a no-op. The run's identity
(pipelines.core.trainers.TrainerRun.identity: shards, preset, seed, epochs, overrides, ...) is kept beside
its files (RUN_FILE), written only after the trainer exited 0, and removed before any trainer starts there,
so a killed run never looks finished.

A finished report is final too (REPORT_FILE, `final_report`): once results.json and report.md are written, the
run's identity (its flags that shape the numbers, and the data's fingerprint) and the two files' digests are
recorded beside them. A rerun of that run reports them again untouched, training nothing: under a time budget a
rerun would otherwise resume what the budget cut short and change the numbers. The same folder asked for
another run (other flags or data) is refused, naming --overwrite, which reruns the recipe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from pathlib import Path

from common.atomic import write_json_atomic
from trainer.run_summary import RunSummary, read_summary

log = logging.getLogger("pipelines")
RUN_FILE = "trainer_run.json"
# RUN_FILE moved aside while a trainer runs: what the folder's last.pt was trained as, until a trainer finishes
STARTED_FILE = "trainer_run.started.json"
REPORT_FILE = "finished.json"  # beside a recipe's results.json and report.md: whose report they are
REPORTS = ("results.json", "report.md")
# flags that decide where and how fast a run goes, not its numbers: a rerun may change them
NOT_IDENTITY = {
    "out": None,
    "trainer": ("parallel", "overwrite", "offers_overwrite"),
    "shards": ("root", "num_cpus"),
    "source": ("held_out_max",),  # the split it makes reaches the identity through the data's fingerprint
}


class FinishedError(ValueError):
    """A finished report that this run would change; the message names the folder and --overwrite."""


def finished_summary(run) -> RunSummary | None:
    """The summary of `run` (a TrainerRun) when its folder holds that run, finished, else None."""
    run_dir = Path(run.run_dir)
    try:
        recorded = json.loads((run_dir / RUN_FILE).read_text())
        summary = read_summary(run_dir)
    except (OSError, ValueError):
        return None
    whole = (run_dir / "last.pt").is_file() or summary.weights_from  # --eval-weights writes no last.pt
    return summary if recorded == run.identity() and whole else None


def trained_otherwise(run) -> bool:
    """The folder of `run` holds a finished run of other flags (another --train-arg, epochs or candidate): a
    resume there would be refused by the trainer, so the recipe's --overwrite retrains it. Also after a rerun of
    other flags failed there (the trainer refused to resume it): its record was only moved aside (STARTED_FILE),
    so the --overwrite the refusal names still retrains it."""
    for name in (RUN_FILE, STARTED_FILE):
        try:
            return json.loads((Path(run.run_dir) / name).read_text()) != run.identity()
        except (OSError, ValueError):
            continue
    return False


def forget(run_dir: Path) -> None:
    """Before a trainer starts in the folder: until it exits 0, the folder is not finished (its record is moved
    aside, for trained_otherwise)."""
    if (run_dir / RUN_FILE).is_file():
        (run_dir / RUN_FILE).replace(run_dir / STARTED_FILE)


def mark_finished(run) -> None:
    write_json_atomic(Path(run.run_dir) / RUN_FILE, run.identity())
    (Path(run.run_dir) / STARTED_FILE).unlink(missing_ok=True)


def write_if_changed(path: Path, payload: dict) -> None:
    """Write the JSON unless the file already holds exactly that (a rerun leaves it untouched)."""
    try:
        if json.loads(path.read_text()) == json.loads(json.dumps(payload, default=float)):
            return
    except (OSError, ValueError):
        pass
    write_json_atomic(path, payload)


def run_identity(config: dict, fingerprint: str) -> dict:
    """What a recipe's numbers depend on: its config (RunConfig.to_dict) less NOT_IDENTITY, and the data's
    fingerprint, as JSON would hold it."""
    kept = {}
    for key, value in config.items():
        drop = NOT_IDENTITY.get(key, ())
        if drop is None:
            continue
        kept[key] = {k: _absolute(v) for k, v in value.items() if k not in drop} if isinstance(value, dict) else value
    return json.loads(json.dumps({"config": kept, "data": fingerprint}, default=str))


def _absolute(value):
    """A local file's path as an absolute one: the same command from another folder names the same files."""
    return str(Path(value).resolve()) if isinstance(value, str) and value and Path(value).exists() else value


def _digests(out: Path) -> dict | None:
    try:
        return {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in REPORTS}
    except OSError:
        return None


def final_report(out: Path, identity: dict, overwrite: bool) -> str | None:
    """report.md's text when `out` holds the finished report of the run `identity`; None when it holds none
    (never finished, an edited file, or `overwrite`). FinishedError when it holds another run's."""
    try:
        recorded = json.loads((out / REPORT_FILE).read_text())
    except (OSError, ValueError):
        return None
    if overwrite or _digests(out) != recorded.get("digests"):
        return None
    if recorded.get("identity") != identity:
        changed = sorted(_changed(recorded.get("identity") or {}, identity))
        raise FinishedError(
            f"{out}: holds the finished report of another run ({', '.join(changed) or 'its flags'} changed); a "
            "finished report is final: pass --overwrite to run again and replace it, or another --out"
        )
    return (out / "report.md").read_text()


def _changed(old: dict, new: dict, prefix: str = "") -> list[str]:
    """The dotted names of the fields that differ between two identities."""
    names = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            names += _changed(a, b, f"{prefix}{key}.")
        elif a != b:
            names.append(f"{prefix}{key}")
    return names


def reuse_report(out: Path, report: str) -> None:
    """Say it, and print the table as publish_results does."""
    log.info("%s: the finished report of this run, reused as it is (pass --overwrite to run again)", out)
    sys.stdout.write("\n" + report)


def mark_report(out: Path, identity: dict) -> None:
    """After results.json and report.md are written: this run's report, final."""
    write_json_atomic(out / REPORT_FILE, {"identity": identity, "digests": _digests(out)})
