"""`--preset auto`'s final seeds: once the search (pipelines.auto.search) has chosen a candidate and its
epoch count, train each seed with it and evaluate it once, at that epoch, on valid and test.

This module owns the seed folders' side of the recipe: the trainer flags of a final seed, whether a seed
folder already holds this choice's finished run (reused), a run to resume, or another choice's run (its
FINAL_MARK differs: trained afresh), and the seeds whose weights already exist (the search winner's seed
SEARCH_SEED, the training-negatives stage's seed: pipelines.auto.negatives), which evaluate that best.pt
(trainer --eval-weights) instead of training the same weights again.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from common.eval_scores import scores_path
from pipelines.auto.candidates import Candidate
from common.atomic import write_json_atomic
from pipelines.auto.runs import _summary, entry_flag
from pipelines.core.trainers import Job, run_trainers

log = logging.getLogger("pipelines.auto")  # one logger for the whole auto recipe

FINAL_MARK = "auto_final.json"  # in a final seed's folder: the choice it was trained for


def final_flags(args, chosen: dict, protocol: str, select: str, seed: int, run_dir: Path,
                reuse: Path | None = None, fresh: bool = False) -> list[str]:
    """The winner's config for a final seed: same lr schedule span, stopped and evaluated once (valid and
    test) at the chosen epoch, its logits saved for the prior (valid/<select> too when selection ranks on
    another protocol). A folder whose run finished without them (an older recipe) is trained afresh.
    `reuse`: evaluate these weights instead of training (--eval-weights, in a cleared folder); `fresh`: the
    folder holds another choice's run, cleared too."""
    c = Candidate(**{**{k: v for k, v in chosen["config"].items() if k != "cid"},
                     "sampling": tuple(chosen["config"]["sampling"])})
    e = str(chosen["epochs"])
    entry = "--overwrite" if fresh or reuse or final_done(run_dir, chosen, protocol, select) is False else entry_flag(run_dir)
    extra = (["--score-protocols", select] if select != protocol else []) + (["--eval-weights", str(reuse)] if reuse else [])
    return ["--shards", chosen["shards"], "--preset", "auto", "--out", str(run_dir), "--seed", str(seed),
            "--protocol", protocol, "--device", args.device, entry, "--eval-splits", "valid,test",
            "--stop-epoch", e, "--eval-every", e, "--save-scores", *extra, *c.trainer_flags(),
            *[a for arg in args.train_arg for a in arg.split("=", 1)]]


def reusable_weights(winner_dir: Path, chosen: dict) -> Path | None:
    """The best.pt of a run (the search winner's, or a training-negatives stage run) when it holds the weights
    at the chosen epoch: the final seed of that run's seed, trained with the same flags on the same views to
    that epoch, would reach exactly these (trainer.eval_only), so it evaluates them instead."""
    summary = _summary(winner_dir) or {}
    ok = summary.get("best_epoch") == chosen["epochs"] - 1 and (winner_dir / "best.pt").is_file()
    return winner_dir / "best.pt" if ok else None


def final_key(chosen: dict) -> dict:
    """What a seed folder's run is a run of. Not the epochs: a rerun that climbs a rung further resumes the
    same candidate's seeds to the later best epoch (the lr schedule spans the candidate's max epochs)."""
    return {"cid": chosen["cid"], "shards": chosen["shards"]}


def final_done(run_dir: Path, chosen: dict, protocol: str, select: str) -> bool | None:
    """True: the seed finished at the chosen epoch with its scores; False: finished without them; None: not
    finished (a new folder, or a run to resume)."""
    if not (_summary(run_dir) or {}).get("epochs_completed", 0) >= chosen["epochs"]:
        return None
    return all(scores_path(run_dir, s, p).is_file() for s, p in (("valid", select), ("test", protocol)))


def trained_for_another_choice(run_dir: Path, chosen: dict) -> bool:
    """The seed folder holds a run of another choice (the mark differs): it must be trained afresh, never
    reused or resumed."""
    mark = Path(run_dir) / FINAL_MARK
    return mark.is_file() and json.loads(mark.read_text()) != final_key(chosen)


def train_final_seeds(args, chosen: dict, protocol: str, select: str, runs: dict[int, Path],
                      weights: dict[int, Path], slots: int) -> dict[int, Path]:
    """Bring every seed folder in `runs` to the chosen run (a finished one is reused), `slots` trainers at
    once, then mark each with the choice. `weights`: {seed: a best.pt of that seed trained with the same flags
    on the chosen views to the chosen epoch}, evaluated instead of training (the search winner's for seed
    SEARCH_SEED, the training-negatives stage's for its seed); returns those the seeds in `runs` evaluated."""
    used = {s: w for s, w in weights.items() if s in runs}
    jobs = {}
    for s, d in runs.items():
        other = trained_for_another_choice(d, chosen)
        if other:
            log.info("seed %d: its folder holds a run of another choice (%s); training it afresh", s, d / FINAL_MARK)
        elif final_done(d, chosen, protocol, select):
            continue
        flags = final_flags(args, chosen, protocol, select, s, d, used.get(s), fresh=other)
        if s in used:
            log.info("seed %d: evaluating its weights at epoch %d (%s) instead of training them again", s,
                     chosen["epochs"], used[s])
        jobs[f"seed {s}"] = Job(flags, d)
    run_trainers(jobs, slots, device_flag=args.device)
    for d in runs.values():
        write_json_atomic(Path(d) / FINAL_MARK, final_key(chosen))
    return used
