"""Training curves and metric-per-epoch plots (PNG) from the trainer's metrics.jsonl files."""

from __future__ import annotations

import logging
from pathlib import Path

from trainer.metrics_log import read_metrics

log = logging.getLogger(__name__)


def run_metrics(run_dir: Path) -> list[dict]:
    """A run folder's metrics.jsonl records; none for a run that has not logged yet."""
    path = Path(run_dir) / "metrics.jsonl"
    return read_metrics(path) if path.exists() else []


def save_figure(fig, path: Path) -> Path:
    """Lay out, write (creating the folder) and close a matplotlib figure; returns the path."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_runs(run_dirs: list[Path], out_dir: Path, metric: str = "mrr") -> list[Path]:
    """training_loss.png (loss per step, one line per run) and <metric>_per_epoch.png (valid and test)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    runs = {Path(d).name: run_metrics(d) for d in run_dirs}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, records in runs.items():
        train = [r for r in records if r["event"] == "train"]
        ax.plot([r["step"] for r in train], [r["loss"] for r in train], label=name)
    ax.set(xlabel="optimiser step", ylabel="training loss (BCE)", title="Training loss")
    ax.legend()
    written.append(save_figure(fig, out_dir / "training_loss.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, records in runs.items():
        for split, style in (("valid", "-"), ("test", "--")):
            evals = [r for r in records if r["event"] == "eval" and r.get("split") == split and metric in r]
            if evals:
                ax.plot(
                    [r["epoch"] for r in evals],
                    [100 * r[metric] for r in evals],
                    style,
                    marker="o",
                    markersize=3,
                    label=f"{name} {split}",
                )
    ax.set(xlabel="epoch", ylabel=f"{metric.upper()} (%)", title=f"{metric.upper()} per epoch")
    ax.legend(fontsize=7)
    written.append(save_figure(fig, out_dir / f"{metric.replace('@', '')}_per_epoch.png"))
    log.info("plots: %s", ", ".join(map(str, written)))
    return written
