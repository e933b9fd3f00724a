"""The training loop: thin glue between data, model, optimiser, eval and checkpoints.

Optimiser step = `accum` micro-batches per rank, the same count on every rank (so the DDP gradient
all-reduce, done only on the last micro-step, never waits on a rank that has stopped). Micro-batches
are sized by a token budget and so hold varying numbers of links; the step's global link count S is
all-reduced first and each micro-loss is sum-of-losses x world / S, which makes the gradient exactly
the mean over the S links of the step, as a full batch would give. accum is fixed for the run from
the manifest: effective_batch / (world x expected links per micro-batch); with the default token
budget every micro-batch holds the cap, so the effective batch is exact.

The step issues no host synchronisation on CUDA (no .item()/float() of device values, the counts go up
through pinned memory): the host runs ahead and queues work. Loss and throughput reach the host only at
log steps. Cadence: last.pt at most once per --checkpoint-seconds (rank 0's clock, broadcast at
epoch ends and log steps so ranks agree) plus at the end / on a stop; best.pt holds weights only; test is
scored only when validation improves (--test-every-eval for every time); evaluation runs in fp32.

Public API: `run(config) -> summary dict` (tests and benches, in-process), `main(argv)` (python -m trainer: the
pipelines start trainers as processes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from common.atomic import write_text_atomic
from common.cli import raise_if_interrupted
from common.datasets import given_by_path
from common.eval_scores import epoch_scores_path, scores_path, write_scores
from common.metrics import improves
from common.presets import get_preset
from trainer import checkpoint, distributed, optim, run_folder
from trainer.config import TrainConfig, build_parser, config_from_args
from trainer.config_sections import ConfigError
from trainer.data import loaders
from trainer.data import stream as data
from trainer.eval_only import evaluate_weights
from trainer.evaluate import evaluate_split, selection_metric
from trainer.metrics_log import MetricsLog, Window, progress_bar
from trainer.resolve import config_for_run, load_last
from trainer.run_summary import RunSummary, write_summary
from trainer.setup import autocast_for, build_model, check_run, setup_logging, torch_settings

log = logging.getLogger("trainer")


@dataclass
class LoopState:
    """Everything about progress that a checkpoint must restore (plain data)."""

    step: int = 0  # optimiser steps taken
    epoch: int = 0  # current epoch
    batch: int = 0  # batches of `epoch` already consumed on every rank (the data position)
    best_metric: float = -math.inf
    best_epoch: int | None = None
    best_step: int | None = None
    best: dict = field(default_factory=dict)  # split -> metrics at the best validation epoch
    last_eval: dict = field(default_factory=dict)
    last_eval_step: int = -1
    train_time_s: float = 0.0


class Trainer:
    def __init__(self, config: TrainConfig, info: distributed.DistInfo):
        self.info = info
        self.manifest = check_run(config)
        self.n_max = self.manifest.n_max
        self.view_stats = data.view_stats(self.manifest, 0)  # (links, tokens) of a training view: batch sizing
        ckpt = load_last(config)
        self.config = config_for_run(config, ckpt, self.manifest, self.view_stats, info.world_size, info.device.type)
        self.preset = get_preset(self.config.preset)
        self.out = Path(self.config.out)
        self.metric = (
            (self.config.select_on or selection_metric(self.manifest, self.config.protocol))
            if "valid" in self.config.eval_splits
            else None
        )
        self.autocast = autocast_for(info.device)
        self.state = LoopState(**ckpt["state"]) if ckpt else LoopState()
        self.model, self.core = build_model(self.config, self.preset, self.manifest, info, ckpt)
        trainable = [p for p in self.core.parameters() if p.requires_grad]  # W0 is frozen
        self.optimizer = optim.adamw(trainable, self.config.optim.lr, self.config.optim.weight_decay, info.device)
        if ckpt:
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self._restore_rng(ckpt)
        self.accum, self.per_micro = self._accumulation()
        self.metrics = MetricsLog(self.out, enabled=info.is_main, resume_step=self.state.step if ckpt else None)
        self._clock = time.time()  # train_time_s accumulates from here (see _tick)
        self._saved_at = time.time()  # last write of last.pt (wall-time cadence)

    # ------------------------------------------------------------------ setup
    def _restore_rng(self, ckpt: dict) -> None:
        states = ckpt.get("rng")
        if states and len(states) == self.info.world_size:
            checkpoint.restore_rng(states[self.info.rank])

    def _accumulation(self) -> tuple[int, int]:
        d = self.config.data
        links, tokens = self.view_stats
        tokens *= d.orderings  # LRP-k feeds every link k times
        per_micro = min(d.max_samples, max(1, d.token_budget // max(1, math.ceil(tokens / max(1, links)))))
        accum = max(1, round(self.config.optim.effective_batch / (self.info.world_size * per_micro)))
        return accum, per_micro

    # ------------------------------------------------------------------ loop
    def fit(self) -> RunSummary:
        cfg, info, st = self.config, self.info, self.state
        if info.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.out / "config.json", json.dumps(cfg.to_dict(), indent=1))
        from trainer.model.attention import describe_backend

        log.info(
            "PENCIL trainer: attention backend %s | device %s | world size %d (%s) | %d trainable parameters",
            self.core.attention_backend,
            info.device,
            info.world_size,
            info.backend or "single process",
            self.core.num_parameters(),
        )
        log.info(describe_backend(cfg.model.attention, self.core.attention_backend, self.core.cfg.attn_dropout))
        if cfg.compile:
            log.info("--compile: blocks compiled (dynamic shapes); the first steps and eval include the compile time")
        log.info(
            "batches: <= %d links / <= %d tokens per micro-batch, %d micro-step(s) per optimiser step -> "
            "effective batch ~ %d (preset asks %d); N_max %d, %d view(s)%s",
            cfg.data.max_samples,
            cfg.data.token_budget,
            self.accum,
            self.accum * self.per_micro * info.world_size,
            cfg.optim.effective_batch,
            self.n_max,
            self.manifest.views,
            f"; LRP-{cfg.data.orderings}: {cfg.data.orderings} labeled subgraphs per link, DeepSets-pooled"
            if cfg.data.orderings > 1
            else "",
        )
        self._clock = self._saved_at = time.time()
        n_epochs = min(math.ceil(cfg.epochs), cfg.stop_epoch or math.ceil(cfg.epochs))
        stopped = self.converged()
        while st.epoch < n_epochs and not stopped:
            stopped = self.train_epoch(n_epochs) or self.converged()
        if st.last_eval_step != st.step:
            self.run_eval(final=True)
        self.save_last()
        summary = self.summary()
        if info.is_main:
            write_summary(self.out, summary)
        self.metrics.close()
        loaders.close_loaders()  # the run's persistent loader workers end with it
        distributed.barrier(info)  # when run() returns on any rank, rank 0's files are complete
        return summary

    def converged(self) -> bool:
        """--patience P: the last P evaluations (P epochs at --eval-every 1) did not improve validation."""
        p, st = self.config.patience, self.state
        return bool(p and st.best_epoch is not None and st.epoch - 1 - st.best_epoch >= p * self.config.eval_every)

    def _steps_left(self) -> bool:
        return self.config.max_steps is None or self.state.step < self.config.max_steps

    def train_epoch(self, n_epochs: int) -> bool:
        """Train from the current position to the end of the epoch; True if max_steps stopped it."""
        cfg, st = self.config, self.state
        fraction = min(1.0, cfg.epochs - st.epoch)
        settings = loaders.LoaderSettings.for_rank(cfg.data, self.info)
        loader, plan = loaders.train_loader(self.manifest, st.epoch, settings, start=st.batch, fraction=fraction)
        steps = math.ceil(plan.batches / self.accum)
        bar = progress_bar(st.epoch, steps, st.batch // self.accum, self.info.is_main and cfg.progress)
        it = iter(loader)
        window = Window()
        while st.batch < plan.batches and self._steps_left():
            raise_if_interrupted()  # a Ctrl-C lost while the loader forked its workers still stops the run
            for group in self.optimizer.param_groups:  # by progress, so a resumed run follows the same curve
                group["lr"] = cfg.optim.lr_at((st.epoch + fraction * st.batch / plan.batches) / cfg.epochs)
            micro = [next_batch(it, st, plan) for _ in range(min(self.accum, plan.batches - st.batch))]
            loss, samples, tokens = self.train_step(micro)
            st.batch += len(micro)
            st.step += 1
            window.add(loss, samples, tokens)
            logged = st.step % cfg.log_every == 0 or st.batch >= plan.batches or not self._steps_left()
            if logged:
                self._log_train(window, bar)
            bar.update(1)
            if (
                st.batch < plan.batches
                and self._steps_left()
                and (
                    (cfg.checkpoint_every and st.step % cfg.checkpoint_every == 0)
                    or (logged and cfg.checkpoint_seconds > 0 and self._save_due())
                )
            ):
                self.save_last()
        bar.close()
        del it  # the loader persists (trainer.data.stream): its workers wait, forked once, for the next epoch
        if st.batch < plan.batches:
            return True
        st.epoch, st.batch = st.epoch + 1, 0
        if st.epoch % cfg.eval_every == 0 or st.epoch >= n_epochs:
            self.run_eval()
        # the run's end and a --max-steps stop save in fit(); other epoch ends only when due
        if st.epoch < n_epochs and self._steps_left() and self._save_due():
            self.save_last()
        return not self._steps_left()

    def _save_due(self) -> bool:
        """Wall-time cadence of last.pt; rank 0's clock decides so every rank joins save_last together."""
        secs = self.config.checkpoint_seconds
        due = secs <= 0 or time.time() - self._saved_at >= secs
        return bool(distributed.broadcast_object(due, self.info))

    def train_step(self, micro: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One optimiser step over this rank's micro-batches; returns global (loss sum, samples, tokens)."""
        info, model = self.info, self.model
        model.train()
        local = [float(sum(b.num_links for b in micro)), float(sum(b.num_tokens for b in micro))]
        if info.is_distributed:
            # host ints -> device without a blocking copy (pinned source), then an async all-reduce
            counts = torch.tensor(local, dtype=torch.float64, pin_memory=info.device.type == "cuda")
            counts = distributed.all_reduce_sum(counts.to(info.device, non_blocking=True), info)
            scale = info.world_size / counts[0]  # sum-loss x world / S: DDP's mean over ranks -> mean over S
        else:
            counts, scale = local, 1.0 / local[0]  # plain floats: nothing to reduce, nothing to sync
        loss_sum = torch.zeros((), dtype=torch.float64, device=info.device)
        for i, batch in enumerate(micro):
            last = i == len(micro) - 1
            sync = contextlib.nullcontext() if (last or not info.is_distributed) else model.no_sync()
            batch = batch.to(info.device, non_blocking=True)
            with sync:
                with self.autocast():
                    logits = model(batch)
                loss = self.core.loss(logits, batch.link_label) * batch.num_links
                (loss * scale).backward()
            loss_sum += loss.detach()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return distributed.all_reduce_sum(loss_sum, info), counts[0], counts[1]

    # ------------------------------------------------------------------ eval, checkpoints, reporting
    def run_eval(self, final: bool = False) -> None:
        """Validation, then test only if validation improved (the only test number reported is the one at
        the best validation epoch), or always with --test-every-eval / when there is no validation.
        --save-scores: the logits of the evaluation the summary reports (it improved) go to OUT/scores/."""
        cfg, st = self.config, self.state
        epoch = st.epoch - 1 if st.batch == 0 and st.epoch > 0 else st.epoch  # the epoch just trained
        results, keep = {}, ({} if cfg.save_scores or cfg.save_epoch_scores else None)
        if "valid" in cfg.eval_splits:
            results["valid"] = self._eval_split("valid", epoch, final, keep)
        improved = bool(
            self.metric
            and self.metric in results.get("valid", {})
            and improves(self.metric, results["valid"][self.metric], st.best_metric)
        )
        if "test" in cfg.eval_splits and (improved or cfg.test_every_eval or not self.metric):
            results["test"] = self._eval_split("test", epoch, final, keep)
        st.last_eval, st.last_eval_step = results, st.step
        if cfg.save_scores and (improved or not self.metric):
            self._save_scores(keep, epoch, final)
        if cfg.save_epoch_scores and self.info.is_main:
            for (split, protocol), (cid, score) in keep.items():
                write_scores(epoch_scores_path(self.out, split, protocol, epoch), cid, score, epoch)
        if improved:
            st.best_metric, st.best_epoch, st.best_step, st.best = (
                results["valid"][self.metric],
                epoch,
                st.step,
                results,
            )
            if self.info.is_main:
                best = {k: getattr(st, k) for k in ("best_metric", "best_epoch", "best_step", "best", "step", "epoch")}
                checkpoint.save_atomic(
                    checkpoint.make_weights_payload(self.core, best, self.config.to_dict()), self.out / checkpoint.BEST
                )
            log.info("new best valid %s %.4f at epoch %d", self.metric, st.best_metric, st.best_epoch)

    def _save_scores(self, keep: dict, epoch: int, final: bool) -> None:
        """Rank 0 writes each evaluated set's scores."""
        for (split, protocol), (cid, score) in keep.items() if self.info.is_main else ():
            write_scores(scores_path(self.out, split, protocol), cid, score, epoch)

    def _eval_split(
        self, split: str, epoch: int, final: bool, keep: dict | None = None, protocol: str | None = None
    ) -> dict:
        cfg, st, protocol = self.config, self.state, protocol or self.config.protocol
        t = time.time()
        result = evaluate_split(self.core, self.manifest, split, protocol, cfg.data, self.info, keep)
        raise_if_interrupted()  # e.g. lost while the eval loader forked its workers (common.cli.latch_sigint)
        self.metrics.write(
            "eval",
            step=st.step,
            epoch=epoch,
            split=split,
            protocol=protocol,
            final=final,
            seconds=round(time.time() - t, 3),
            **result,
        )
        log.info(
            "eval epoch %d step %d %s/%s: %s",
            epoch,
            st.step,
            split,
            protocol,
            " ".join(f"{k} {v:.4f}" for k, v in result.items()),
        )
        return result

    def _tick(self) -> None:
        """Fold the wall time since the last tick into train_time_s, so a checkpoint carries the time spent
        so far and a resumed run adds to it (the time between the checkpoint and a kill is lost work)."""
        now = time.time()
        self.state.train_time_s += now - self._clock
        self._clock = now

    def save_last(self) -> None:
        """All ranks call this (the RNG states are gathered); rank 0 writes."""
        self._tick()
        rng = distributed.all_gather_object(checkpoint.capture_rng(), self.info)
        if self.info.is_main:
            payload = checkpoint.make_payload(
                self.core, self.optimizer, vars(self.state), self.config.to_dict(), rng, self.info.world_size
            )
            checkpoint.save_atomic(payload, self.out / checkpoint.LAST)
        self._saved_at = time.time()

    def _log_train(self, window: Window, bar) -> None:
        loss, sps, tps = window.flush()
        st = self.state
        self.metrics.write(
            "train",
            step=st.step,
            epoch=st.epoch,
            batch=st.batch,
            loss=loss,
            lr=self.optimizer.param_groups[0]["lr"],
            samples_per_s=sps,
            tokens_per_s=tps,
        )
        bar.set_postfix(loss=f"{loss:.4f}", samples_s=f"{sps:.0f}", tokens_s=f"{tps:.0f}")

    def summary(self) -> RunSummary:
        st, cfg = self.state, self.config
        pre = self.manifest.config
        return RunSummary(
            preset=cfg.preset,
            dataset=self.manifest.dataset or self.preset.dataset,
            # the data's name (a user's edges.csv is "edges", never the preset's paper dataset) and whether it is theirs
            own_graph=bool(given_by_path(str(pre.get("dataset", "")), pre.get("data_dir"))),
            protocol=cfg.protocol,
            selection_metric=self.metric,
            best_epoch=st.best_epoch,
            best_step=st.best_step,
            valid=st.best.get("valid"),
            test=st.best.get("test"),
            last_eval=st.last_eval,
            steps=st.step,
            epochs_completed=st.epoch,
            converged=self.converged(),
            train_time_s=round(st.train_time_s, 3),
            attention_backend=self.core.attention_backend,
            world_size=self.info.world_size,
            device=str(self.info.device),
            accumulation=self.accum,
            num_parameters=self.core.num_parameters(),
            node_features=self.core.features is not None,  # read them: the report's 'PENCIL' (else 'w/o features')
            config=cfg.to_dict(),
        )


def next_batch(it, st: LoopState, plan) -> object:
    try:
        return next(it)
    except StopIteration:
        raise RuntimeError(
            f"loader ended at batch {st.batch} of {plan.batches} in epoch {plan.epoch}; "
            "the per-rank batch count is inconsistent (a bug)"
        ) from None


def run(config: TrainConfig) -> dict:
    """Train and evaluate; returns the summary's dict (RunSummary.to_dict(); also OUT/summary.json on rank 0).
    Rank 0 holds the run folder (trainer.run_folder: lock, --resume / --overwrite) for the whole run."""
    raise_if_interrupted()
    check_run(config)  # bad --out / --shards / --protocol fail here, before a folder, a process group or a model exists
    with run_folder.claim(config.out, config.resume, config.overwrite, owner=int(os.environ.get("RANK", 0)) == 0):
        return _run(config)


def _run(config: TrainConfig) -> dict:
    created = not (torch.distributed.is_available() and torch.distributed.is_initialized())
    info = distributed.init_distributed(config.device)
    setup_logging(info)
    try:
        with torch_settings(config, info):
            trainer = Trainer(config, info)
            summary = evaluate_weights(trainer, config.eval_weights) if config.eval_weights else trainer.fit()
            return summary.to_dict()
    finally:
        if created:
            distributed.cleanup()


def main(argv: list[str] | None = None, prog: str = "python -m trainer") -> int:
    """`python -m trainer`: errors are one line on stderr (exit 2 for flags, 1 otherwise); --debug: traceback."""
    from common.cli import run_cli

    return run_cli(lambda a: _main(a, prog), argv, prog=prog)


def _main(argv: list[str] | None, prog: str) -> int:
    try:
        config = config_from_args(argv, prog)
    except ConfigError as err:
        build_parser(prog).error(str(err))
    summary = run(config)
    if int(os.environ.get("RANK", 0)) == 0:  # the CLI's one print: the summary, for shells and pipelines
        print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=1, default=float))
    return 0
