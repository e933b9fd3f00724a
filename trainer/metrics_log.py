"""Metrics out: JSON lines (always, on rank 0) and TensorBoard (when it is installed).

metrics.jsonl holds one object per line, e.g.
    {"event": "train", "step": 120, "epoch": 3, "loss": 0.41, "lr": 0.0005, "samples_per_s": ...,
     "tokens_per_s": ..., "time": ...}
    {"event": "eval", "step": 120, "epoch": 3, "split": "valid", "protocol": "original", "mrr": ...,
     "hits@1": ..., "auc": ..., "ap": ...}
Other ranks get a disabled logger, so callers never branch on the rank.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

from common.atomic import write_text_atomic

log = logging.getLogger(__name__)


def progress_bar(epoch: int, total: int, done: int, enabled: bool):
    """The epoch's tqdm bar (steps), shown on rank 0 with --progress only."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=done,
        desc=f"epoch {epoch}",
        unit="step",
        dynamic_ncols=True,
        disable=not enabled,
        leave=False,
    )


def _tensorboard(run_dir: Path, purge_step: int | None = None):
    try:
        import tensorboard  # noqa: F401  (SummaryWriter imports but fails late without it)
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    # purge_step hides events a killed run logged after its checkpoint, as truncate_after does for jsonl
    return SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=purge_step)


def truncate_after(path: Path, step: int) -> int:
    """Drop the records of steps after `step` (written after the checkpoint a run resumes from, so the
    resumed run writes them again) and a torn last line (a kill mid-write). Atomic: temp file + rename.
    Returns the number of lines dropped."""
    if not path.exists():
        return 0
    lines = path.read_text().splitlines()
    keep = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # torn write
        if not isinstance(rec, dict) or rec.get("step", -1) <= step:
            keep.append(line)
    if len(keep) < len(lines):
        write_text_atomic(path, "".join(f"{line}\n" for line in keep))
    return len(lines) - len(keep)


class MetricsLog:
    def __init__(
        self, run_dir: str | Path, enabled: bool = True, tensorboard: bool = True, resume_step: int | None = None
    ):
        """resume_step: the step of the checkpoint a run resumes from; later records are dropped first."""
        self.enabled = enabled
        self.path = Path(run_dir) / "metrics.jsonl"
        self._file = None
        self._tb = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if resume_step is not None and (dropped := truncate_after(self.path, resume_step)):
                log.info(
                    "metrics.jsonl: dropped %d record(s) written after the checkpoint's step %d", dropped, resume_step
                )
            self._file = open(self.path, "a", buffering=1)  # line-buffered: a killed run keeps its lines
            purge = None if resume_step is None else resume_step + 1
            self._tb = _tensorboard(self.path.parent, purge) if tensorboard else None

    def write(self, event: str, **fields) -> None:
        if not self.enabled:
            return
        record = {"event": event, **fields, "time": time.time()}
        self._file.write(json.dumps(record, default=float) + "\n")
        if self._tb is not None and "step" in fields:
            tag = "/".join(str(fields[k]) for k in ("split", "protocol") if k in fields)
            for k, v in fields.items():
                if k not in ("step", "epoch") and isinstance(v, (int, float)) and math.isfinite(v):
                    self._tb.add_scalar(f"{event}/{tag}/{k}" if tag else f"{event}/{k}", v, fields["step"])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


class Window:
    """Global loss / throughput over the steps since the last log line (device tensors until flushed)."""

    def __init__(self):
        self.loss = self.samples = self.tokens = 0.0
        self.t = time.time()

    def add(self, loss, samples, tokens) -> None:
        self.loss, self.samples, self.tokens = self.loss + loss, self.samples + samples, self.tokens + tokens

    def flush(self) -> tuple[float, float, float]:
        dt = max(time.time() - self.t, 1e-9)
        samples = float(self.samples)
        out = (float(self.loss) / max(samples, 1.0), samples / dt, float(self.tokens) / dt)
        self.__init__()
        return out


def read_metrics(path: str | Path, event: str | None = None) -> list[dict]:
    """Records of a metrics.jsonl (optionally one event type); for tests and reports."""
    out = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if event is None or rec.get("event") == event:
                out.append(rec)
    return out
