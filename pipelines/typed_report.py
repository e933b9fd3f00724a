"""The per-relation table of a typed graph's report: MRR and Hits@1/3/10 of each relation's test triples, for each
PENCIL row (mean ± std over its seeds, from the trainer's "mrr/<relation>" metrics) and each heuristic
(pipelines.typed_rows), in percent."""

from __future__ import annotations

from collections import defaultdict

from common.metrics import RELATION_KEYS
from pipelines.core.results import fmt, mean_std


def relation_rows(records: list[dict], heuristics: list[dict], names: tuple[str, ...]) -> list[dict]:
    """One row per (relation, model): the seeds' records of protocol kg grouped by model, then the heuristics'
    {"model", "seeds", "test"} records; a relation no test triple has is left out."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r.get("protocol") == "kg":
            groups[r["model"]].append(r)
    groups.update({h["model"]: [h] for h in heuristics})
    rows = []
    for name in names:
        for model, rs in groups.items():
            values = {
                k: [100.0 * r["test"][f"{k}/{name}"] for r in rs if f"{k}/{name}" in r["test"]] for k in RELATION_KEYS
            }
            if not values["mrr"]:
                continue
            count = next(int(r["test"][f"count/{name}"]) for r in rs if f"count/{name}" in r["test"])
            seeds = sorted(s for r in rs for s in r.get("seeds", [r.get("seed", 0)]))
            rows.append(
                {
                    "relation": name,
                    "triples": count,
                    "model": model,
                    "seeds": seeds,
                    **{k: list(mean_std(v)) for k, v in values.items() if v},
                }
            )
    return rows


def relation_markdown(rows: list[dict]) -> str:
    """The per-relation table (test, percent), after the report's main one."""
    header = ["relation", "test triples", "model", "seeds", *RELATION_KEYS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [f"`{r['relation']}`", f"{r['triples']:,}", r["model"], str(len(r["seeds"]))]
        cells += [fmt(*r[k]) if k in r else "–" for k in RELATION_KEYS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
