"""Multi-seed results: mean ± std over seeds, tables in the format of the paper's, beside its numbers, and
the files every recipe publishes (results.json, report.md)."""

from __future__ import annotations

import json
import logging
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from common.atomic import write_json_atomic, write_text_atomic
from common.metrics import METRIC_KEYS, REVERSE_KEY
from pipelines.core.paper_numbers import paper_reference

log = logging.getLogger("pipelines")
METRICS = METRIC_KEYS  # mrr, hits@1..100, auc, ap
# a directed run's rows also carry reverse accuracy (each edge against its own reverse); a table shows its column
# only where a row has it, so an undirected report is as before
ROW_METRICS = (*METRICS, REVERSE_KEY)


@dataclass(frozen=True)
class SeedResult:
    """A seed's record (what `pencil report` reads) and the result.json it is written to."""

    path: Path
    record: dict


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1, as the paper's ± columns); std 0 for one value."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def fmt(mean: float, std: float) -> str:
    return f"{mean:.2f} ± {std:.2f}"


class ResultsError(ValueError):
    """A file that is not a seed's result.json; the message names it and the fix."""


FIX = "pass run folders, or the result.json files pipelines.run writes in each seed folder"


def load_results(paths: list[Path]) -> list[dict]:
    """Every result.json below the given files/folders, each checked to be a seed's record, with its `source`
    (the file) and its data's fingerprint (`dataset_fingerprint`, from the record or its run's config). A file
    reached twice (a run folder and a seed folder inside it) is refused: it would count one seed twice."""
    found, seen = [], {}
    for p in paths:
        files = [p] if p.is_file() else sorted(p.rglob("result.json"))
        for f in files:
            if (key := f.resolve()) in seen:
                raise ResultsError(
                    f"{f}: reached twice (through {seen[key]} and {p}), so its seed would count "
                    "twice; pass each run once"
                )
            seen[key] = p
            try:
                record = json.loads(f.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise ResultsError(f"{f}: not valid JSON ({' '.join(str(err).split())[:120]}); {FIX}") from None
            missing = [k for k in ("dataset", "protocol", "test") if not isinstance(record, dict) or k not in record]
            if missing or not isinstance(record["test"], dict):
                raise ResultsError(f"{f}: not a seed's result (no {', '.join(missing) or 'test metrics'}); {FIX}")
            config = record.get("config") if isinstance(record.get("config"), dict) else {}
            record.setdefault("seed", config.get("seed", 0))  # a trainer's summary.json names its seed there
            record.setdefault("dataset_fingerprint", _fingerprint_of(f, config))
            record.setdefault("model", _model_of(record, config))
            found.append({**record, "source": str(f)})
    return found


def _model_of(record: dict, config: dict) -> str:
    """The row of a record without one (a trainer's summary.json) from the run itself, as its result.json names it
    (pipelines.core.seeds.result_record): 'PENCIL' when the model read node features, else 'PENCIL w/o
    features'. An older summary without `node_features`: 'w/o features' when trained with --no-features."""
    reads = record.get("node_features")
    if reads is None:
        reads = (config.get("model") or {}).get("features") is not False
    return "PENCIL" if reads else "PENCIL w/o features"


def _fingerprint_of(f: Path, config: dict) -> str | None:
    """The data fingerprint of a record without one: its trainer config's (a summary.json), else the config.json
    of its run folder (the seed folder, or the one above a blend/ record)."""
    if fp := (config.get("data") or {}).get("dataset_fingerprint"):
        return fp
    for folder in (f.parent, f.parent.parent):
        try:
            return json.loads((folder / "config.json").read_text())["data"]["dataset_fingerprint"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def protocol_label(r: dict) -> str:
    """A record's or row's protocol as the report shows it: with the split when a record names it (temporal, or
    random on purpose: pipelines.core.variants), and the protocol that selected its checkpoints when that is
    another (the user's pairs evaluated beside it). A label is a row of its own."""
    label = r["protocol"]
    if r.get("split"):
        label += f", {r['split']} split"
    if r.get("selected_on"):
        label += f", selected on {r['selected_on']}"
    return label


def _row_key(r: dict) -> tuple:
    return r["dataset"], protocol_label(r), r.get("model", "PENCIL"), bool(r.get("own_graph"))


def check_mixing(results: list[dict]) -> None:
    """A row is one experiment: the same seed twice, or runs of different data (another fingerprint under the
    same dataset name), in one row is refused, naming both files."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        groups[_row_key(r)].append(r)
    for (dataset, protocol, model, _), rs in groups.items():
        row = f"{dataset}/{protocol}/{model}"
        prints = {r["dataset_fingerprint"]: r for r in rs if r.get("dataset_fingerprint")}
        if len(prints) > 1:  # first: two graphs also share seed numbers, and that is not the cause
            (a, ra), (b, rb) = list(prints.items())[:2]
            raise ResultsError(
                f"{row}: runs of different data in one row (dataset {a} in {_where(ra)}, {b} in "
                f"{_where(rb)}): two graphs named {dataset}; report them separately"
            )
        by_seed: dict = {}
        for r in rs:
            if (other := by_seed.setdefault(r.get("seed", 0), r)) is not r:
                raise ResultsError(
                    f"{row}: seed {r.get('seed', 0)} twice ({_where(other)} and {_where(r)}): two runs "
                    "of one seed in one row; report them separately"
                )


def _where(record: dict) -> str:
    return record.get("source") or f"seed {record.get('seed', 0)}"


def data_of(results: list[dict]) -> str:
    """What a report covers, for its stamp (common.outputs): the fingerprints of its runs' data, sorted."""
    names = {r.get("dataset_fingerprint") or "_".join(str(r["dataset"]).split()) for r in results}
    return ",".join(sorted(names))


@dataclass(frozen=True)
class TableRow:
    """One row of a report's table (results.json's "table"): a model on a dataset and protocol, each metric as
    (mean, std) in percent over its seeds. `to_dict()` is the row as results.json holds it, the labels only
    when set, so the file's bytes stay those of the same inputs."""

    dataset: str
    protocol: str
    model: str
    seeds: list
    metrics: dict = field(default_factory=dict)  # metric -> (mean, std), in METRICS order
    split: str | None = None  # a temporal or user-chosen split's label
    selected_on: str | None = None  # checkpoints selected on another protocol than the row's
    own_graph: bool = False

    def to_dict(self) -> dict:
        labels = {k: v for k, v in (("split", self.split), ("selected_on", self.selected_on)) if v}
        return {
            "dataset": self.dataset,
            "protocol": self.protocol,
            **labels,
            "model": self.model,
            "seeds": self.seeds,
            **({"own_graph": True} if self.own_graph else {}),
            **{m: self.metrics[m] for m in ROW_METRICS if m in self.metrics},
        }


def aggregate(results: list[dict]) -> list[dict]:
    """Group per (dataset, protocol, model) and reduce each metric to mean ± std over seeds.

    A result holds {"dataset", "protocol", "model", "seed", "test": {metric: fraction}}.
    """
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:  # a user's graph named like a paper dataset stays apart from it (own_graph)
        groups[_row_key(r)].append(r)
    rows = []
    for (dataset, _, model, own), rs in sorted(groups.items()):
        values = {m: [100.0 * r["test"][m] for r in rs if m in r.get("test", {})] for m in ROW_METRICS}
        row = TableRow(
            dataset,
            rs[0]["protocol"],
            model,
            sorted(r.get("seed", 0) for r in rs),
            {m: mean_std(vals) for m, vals in values.items() if vals},
            split=rs[0].get("split") or None,
            selected_on=rs[0].get("selected_on") or None,
            own_graph=own,
        )
        rows.append(row.to_dict())
    return rows


def markdown(rows: list[dict], with_paper: bool = True, lead: str = "mrr") -> str:
    """One table; after each (dataset, protocol) group's measured rows, the paper's rows for it. `lead`: the
    metric the user reads (pencil run --metric), the first metric column."""
    metrics = [lead, *(m for m in METRICS if m != lead)] + (
        [REVERSE_KEY] if any(REVERSE_KEY in r for r in rows) else []
    )
    header = ["dataset", "protocol", "model", "seeds", *metrics]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["dataset"], protocol_label(row), bool(row.get("own_graph")))].append(row)
    for (dataset, label, own), group in groups.items():
        protocol = group[0]["protocol"]
        for row in group:
            cells = [dataset, label, row["model"], str(len(row["seeds"]))]
            cells += [fmt(*row[m]) if m in row else "–" for m in metrics]
            lines.append("| " + " | ".join(cells) + " |")
        # a user's graph has none, nor do checkpoints selected on another protocol than the row's
        ref = paper_reference(dataset, protocol) if with_paper and not own and not group[0].get("selected_on") else None
        if ref:
            metric, models = ref
            for name, (mean, std) in models.items():
                cells = [dataset, label, f"{name} (paper)", "–"]
                cells += [fmt(mean, std) if m == metric else "–" for m in metrics]
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table_json(rows: list[dict]) -> list[dict]:
    """Table rows for JSON: (mean, std) tuples become lists."""
    return [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()} for r in rows]


def publish_results(out: Path, payload: dict, md: str, *also: Path) -> None:
    """A recipe's outputs: results.json and report.md (each written atomically), the table on stdout,
    and one log line naming what was written (`also`: figures and other files)."""
    write_json_atomic(out / "results.json", payload)
    write_text_atomic(out / "report.md", md)
    sys.stdout.write("\n" + md)
    log.info("wrote %s", ", ".join(str(p) for p in (out / "results.json", out / "report.md", *also)))
