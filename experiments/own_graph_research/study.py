"""The study's tables, from the runs of experiments.own_graph_research.run (validation only; test is never read).

    python -m experiments.own_graph_research.study --out runs/research variants   # variants against base
    python -m experiments.own_graph_research.study --out runs/research stopping   # select/stop on MRR or AUC
    python -m experiments.own_graph_research.study --out runs/research noise      # SE calibration on halves
    python -m experiments.own_graph_research.study --out runs/research ensemble   # the seeds' mean logit
    python -m experiments.own_graph_research.study --out runs/research seedcap    # where the final seeds stop

Honest numbers from one validation set: a choice (an epoch, a stopping point) is made on a random half of the
positives and scored on the other half, over many halvings (as experiments.selection_rules does).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from experiments.own_graph_research.scores import per_positive, run_matrices
from pipelines.auto.config import SearchConfig

HALVINGS = 20


def runs(out: Path, variant: str) -> dict[str, dict[int, Path]]:
    """{graph: {seed: run_dir}} of the finished runs of a variant."""
    got: dict[str, dict[int, Path]] = {}
    for done in sorted(out.glob(f"*/{variant}/s*/result.json")):
        got.setdefault(done.parts[-4], {})[int(done.parent.name[1:])] = done.parent
    return got


def values(run_dir: Path) -> dict[str, np.ndarray]:
    """{"mrr": (E, P), "auc": (E, P)} per-positive validation values of every epoch."""
    return per_positive(*run_matrices(run_dir))


def halves(p: int, k: int = HALVINGS, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        perm = rng.permutation(p)
        out.append((perm[: p // 2], perm[p // 2 :]))
    return out


def stop_epoch(curve: np.ndarray, patience: int | None) -> int:
    """The epoch a run stops at with this patience (the run's end without one): `patience` evaluations in a
    row without a better value than the best so far."""
    best, at = -np.inf, 0
    for e, v in enumerate(curve):
        if v > best:
            best, at = v, e
        elif patience and e - at >= patience:
            return e
    return len(curve) - 1


def chosen(v: dict, rows: np.ndarray, metric: str, patience: int | None = None) -> int:
    """The best epoch by `metric` on the given positives, among the epochs before the stop."""
    curve = v[metric][:, rows].mean(1)
    last = stop_epoch(curve, patience)
    return int(np.argmax(curve[: last + 1]))


def honest(v: dict, metric: str, patience: int | None = None) -> dict:
    """Mean over halvings of (MRR, AUC) on half B at the epoch chosen by `metric` on half A."""
    got = {"mrr": [], "auc": [], "epoch": []}
    for a, b in halves(v["mrr"].shape[1]):
        e = chosen(v, a, metric, patience)
        got["epoch"].append(e)
        for m in ("mrr", "auc"):
            got[m].append(v[m][e, b].mean())
    return {k: float(np.mean(x)) for k, x in got.items()}


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def wall(run_dir: Path) -> float:
    """The run's wall seconds (process start to exit, every epoch of its schedule, as run.py timed it)."""
    return float(json.loads((run_dir / "result.json").read_text())["wall_s"])


def variants_table(out: Path, names: list[str], seed: int = 0, against: str = "base") -> str:
    """Per graph: every variant's honest valid MRR / AUC (epoch chosen on MRR), as differences from `against`,
    and its wall time as a multiple of `against`'s (run.py runs a graph's variants side by side)."""
    base = runs(out, against)
    others = {v: runs(out, v) for v in names}
    rows, diffs = [], {v: {"mrr": [], "auc": [], "wall": []} for v in names}
    for g in sorted(base):
        if seed not in base[g]:
            continue
        b = honest(values(base[g][seed]), "mrr")
        row = [g, f"{100 * b['mrr']:.2f}", f"{100 * b['auc']:.2f}"]
        for v in names:
            if seed not in others[v].get(g, {}):
                row += ["–", "–", "–"]
                continue
            o = honest(values(others[v][g][seed]), "mrr")
            ratio = wall(others[v][g][seed]) / wall(base[g][seed])
            row += [f"{100 * (o['mrr'] - b['mrr']):+.2f}", f"{100 * (o['auc'] - b['auc']):+.2f}", f"{ratio:.2f}"]
            for m in ("mrr", "auc"):
                diffs[v][m].append(o[m] - b[m])
            diffs[v]["wall"].append(ratio)
        rows.append(row)
    mean = ["**mean** (wall: geometric)", "", ""]
    wins = ["wins / losses (> 0.5)", "", ""]
    for v in names:
        for m in ("mrr", "auc"):
            d = np.array(diffs[v][m]) * 100
            mean.append(f"**{d.mean():+.2f}** ({len(d)})" if len(d) else "–")
            wins.append(f"{int((d > 0.5).sum())} / {int((d < -0.5).sum())}" if len(d) else "–")
        w = np.array(diffs[v]["wall"])
        mean.append(f"**{np.exp(np.log(w).mean()):.2f}**" if len(w) else "–")
        wins.append("")
    header = ["graph", f"{against} MRR", f"{against} AUC"]
    header += [f"{v} {m}" for v in names for m in ("MRR diff", "AUC diff", "wall x")]
    return table(header, rows + [mean, wins])


def stopping_table(out: Path, variant: str = "base", seed: int = 0) -> str:
    """Per graph: half-B MRR and AUC of the epoch chosen on half A by MRR or by AUC, with the search's patience
    (a quarter of the run's epochs, at least 2) or none, and where the MRR-best epoch lies in the run."""
    rules = [("mrr", None), ("auc", None), ("mrr", "q"), ("auc", "q")]
    rows, acc = [], {r: {"mrr": [], "auc": []} for r in rules}
    for g, seeds in sorted(runs(out, variant).items()):
        if seed not in seeds:
            continue
        v = values(seeds[seed])
        n = v["mrr"].shape[0]
        got = {r: honest(v, r[0], max(2, n // 4) if r[1] else None) for r in rules}
        full = v["mrr"].mean(1)
        row = [g, n, f"{int(np.argmax(full))}", f"{int(np.argmax(v['auc'].mean(1)))}"]
        for r in rules:
            row.append(f"{100 * got[r]['mrr']:.2f} / {100 * got[r]['auc']:.2f} (e{got[r]['epoch']:.0f})")
            for m in ("mrr", "auc"):
                acc[r][m].append(got[r][m])
        rows.append(row)
    base = acc[rules[0]]
    rows.append(
        ["**mean minus MRR, no patience**", "", "", ""]
        + [
            f"{100 * np.mean(np.subtract(acc[r]['mrr'], base['mrr'])):+.2f} / "
            f"{100 * np.mean(np.subtract(acc[r]['auc'], base['auc'])):+.2f}"
            for r in rules
        ]
    )
    header = [
        "graph",
        "epochs",
        "best epoch (MRR, all)",
        "best epoch (AUC, all)",
        "by MRR",
        "by AUC",
        "by MRR, patience E/4",
        "by AUC, patience E/4",
    ]
    return table(header, rows)


def ensemble_table(out: Path, variant: str = "base", seeds=(0, 1, 2)) -> str:
    """Per graph with every seed: half-B MRR / AUC of the seeds' mean logit (each seed at the epoch its own half-A
    MRR picks) against the mean of the single seeds at those epochs."""
    rows, gain = [], {"mrr": [], "auc": []}
    for g, have in sorted(runs(out, variant).items()):
        if not all(s in have for s in seeds):
            continue
        mats = [run_matrices(have[s]) for s in seeds]
        vals = [per_positive(*m) for m in mats]
        single, ens = {"mrr": [], "auc": []}, {"mrr": [], "auc": []}
        for a, b in halves(mats[0][0].shape[1]):
            picks = [chosen(v, a, "mrr") for v in vals]
            for m in ("mrr", "auc"):
                single[m].append(np.mean([v[m][e, b].mean() for v, e in zip(vals, picks)]))
            pos = np.mean([mats[k][0][e] for k, e in enumerate(picks)], axis=0)
            neg = np.mean([mats[k][1][e] for k, e in enumerate(picks)], axis=0)
            both = per_positive(pos[None], neg[None])
            for m in ("mrr", "auc"):
                ens[m].append(both[m][0, b].mean())
        row = [g]
        for m in ("mrr", "auc"):
            s_, e_ = 100 * np.mean(single[m]), 100 * np.mean(ens[m])
            row += [f"{s_:.2f}", f"{e_:.2f}", f"{e_ - s_:+.2f}"]
            gain[m].append(e_ - s_)
        rows.append(row)
    rows.append(["**mean**", "", "", f"**{np.mean(gain['mrr']):+.2f}**", "", "", f"**{np.mean(gain['auc']):+.2f}**"])
    return table(["graph", "one seed MRR", "ensemble MRR", "diff", "one seed AUC", "ensemble AUC", "diff"], rows)


def seed_cap_table(out: Path, variant: str = "base", seeds=(1, 2), margins=(0, 1, 2)) -> str:
    """Where the final seeds stop. Seed 0 is the search's run: it stops at its convergence (patience a quarter of
    the epochs, at least 2, on all its positives). Each other seed trains to a cap and picks its epoch on half A
    (MRR) among those up to the cap, scored on half B: the cap at seed 0's stop (the rule) or at seed 0's best
    epoch + m. Epochs: the mean epochs a seed trains under each cap."""
    caps = ["stop", *[f"best+{m}" for m in margins]]
    rows, acc = [], {c: {"mrr": [], "auc": [], "epochs": []} for c in caps}
    for g, have in sorted(runs(out, variant).items()):
        if 0 not in have or not all(s in have for s in seeds):
            continue
        curve = values(have[0])["mrr"].mean(1)
        n = len(curve)
        last = stop_epoch(curve, SearchConfig().patience_epochs(n))
        others = [values(have[s]) for s in seeds]  # once per graph: every cap reads the same values
        best = int(np.argmax(curve[: last + 1]))
        limit = {"stop": last, **{f"best+{m}": min(last, best + m) for m in margins}}
        row = [g, n, best, last]
        for c in caps:
            got = {"mrr": [], "auc": []}
            for v in others:
                cut = {k: x[: limit[c] + 1] for k, x in v.items()}
                for a, b in halves(v["mrr"].shape[1]):
                    e = int(np.argmax(cut["mrr"][:, a].mean(1)))
                    for m in ("mrr", "auc"):
                        got[m].append(v[m][e, b].mean())
            for m in ("mrr", "auc"):
                acc[c][m].append(np.mean(got[m]))
            acc[c]["epochs"].append(limit[c] + 1)
            row.append(f"{100 * np.mean(got['mrr']):.2f} / {100 * np.mean(got['auc']):.2f} ({limit[c] + 1})")
        rows.append(row)
    ref = acc["stop"]
    mean = ["**mean minus stop** (epochs: sum)", "", "", ""]
    for c in caps:
        dm = 100 * np.mean(np.subtract(acc[c]["mrr"], ref["mrr"]))
        da = 100 * np.mean(np.subtract(acc[c]["auc"], ref["auc"]))
        mean.append(f"{dm:+.2f} / {da:+.2f} ({int(np.sum(acc[c]['epochs']))})")
    rows.append(mean)
    header = ["graph", "epochs", "seed 0 best", "seed 0 stop", *[f"cap {c}: MRR / AUC (epochs)" for c in caps]]
    return table(header, rows)


def option_pairs(out: Path, others: list[str], seed: int = 0) -> dict[str, list[tuple]]:
    """{graph: [(x, y), ...]} pairs of fixed options (pos, neg scores) to calibrate a difference's SE on: each
    other variant against base at the run's middle and last epochs, and base's last epoch against two and five
    epochs earlier (what a stopping rule weighs)."""
    base = runs(out, "base")
    got = {}
    for g, seeds in sorted(base.items()):
        if seed not in seeds:
            continue
        pb, nb = run_matrices(seeds[seed])
        e = pb.shape[0] - 1
        pairs = [((pb[e], nb[e]), (pb[e - k], nb[e - k])) for k in (2, 5) if e - k >= 0]
        for v in others:
            have = runs(out, v).get(g, {})
            if seed in have:
                px, nx = run_matrices(have[seed])
                for k in {e // 2, min(e, px.shape[0] - 1)}:
                    pairs.append(((px[k], nx[k]), (pb[min(k, e)], nb[min(k, e)])))
        got[g] = pairs
    return got


def noise_tables(out: Path, others: list[str]) -> str:
    from experiments.own_graph_research.noise import calibration, margin_rules

    pairs = option_pairs(out, others)
    lines = []
    for metric in ("mrr", "auc"):
        rows = []
        for g, ps in pairs.items():
            c = calibration(ps, metric, halvings=10)
            rows.append(
                [
                    g,
                    len(ps),
                    f"{c['positives']['z_std']:.2f}",
                    f"{100 * c['positives']['outside_1.96']:.0f} %",
                    f"{c['two-way']['z_std']:.2f}",
                    f"{100 * c['two-way']['outside_1.96']:.0f} %",
                    f"{100 * c['negatives_share_of_variance']:.0f} %",
                ]
            )
        allp = [p for ps in pairs.values() for p in ps]
        c = calibration(allp, metric, halvings=10)
        rows.append(
            [
                "**all**",
                len(allp),
                f"**{c['positives']['z_std']:.2f}**",
                f"{100 * c['positives']['outside_1.96']:.0f} %",
                f"**{c['two-way']['z_std']:.2f}**",
                f"{100 * c['two-way']['outside_1.96']:.0f} %",
                f"{100 * c['negatives_share_of_variance']:.0f} %",
            ]
        )
        lines += [
            f"\n**{metric.upper()}**: z = (d_A - d_B) / sqrt(SE_A^2 + SE_B^2) on independent halves\n",
            table(
                [
                    "graph",
                    "pairs",
                    "z std, positives SE",
                    "|z| > 1.96",
                    "z std, two-way SE",
                    "|z| > 1.96",
                    "negatives' share of the variance",
                ],
                rows,
            ),
        ]
        rows, acc = [], {}
        for g, ps in pairs.items():
            x, y = ps[-1]  # the last pair: the other variant's last epoch against base's
            r = margin_rules(y, x, metric)
            rows.append([g] + [f"{100 * r[k]['gain']:+.2f} ({100 * r[k]['switched']:.0f} %)" for k in r])
            for k in r:
                acc.setdefault(k, []).append(r[k]["gain"])
        rows.append(["**mean**"] + [f"**{100 * np.mean(v):+.2f}**" for v in acc.values()])
        lines += [
            f"\n**{metric.upper()}**: half-B gain over base of switching on half A (how often it switched)\n",
            table(["graph", *acc], rows),
        ]
    return "\n".join(lines)


def seal_table(out: Path, names: list[str], seed: int = 0) -> str:
    """Per graph: each PENCIL variant's best validation MRR / AUC over its epochs and its wall time, beside SEAL's
    best over the epochs it finished within that wall time (its preparation included), within 10 epochs, and
    within its whole run. Best over epochs for both sides: the same optimism on each."""
    rows = []
    for g in sorted(p.parts[-3] for p in out.glob("*/seal/result.json")):
        s = json.loads((out / g / "seal" / "result.json").read_text())
        hist = s["history"]

        def seal_best(cut, hist=hist):
            got = [h["valid"] for h in hist if cut(h)]
            if not got:
                return "–"
            return f"{100 * max(x['mrr'] for x in got):.2f} / {100 * max(x['auc'] for x in got):.2f}"

        ten = s["prepare_seconds"] + hist[min(9, len(hist) - 1)]["seconds"]
        row = [
            g,
            f"{seal_best(lambda h: h['epoch'] < 10)} ({ten:.0f} s)",
            f"{seal_best(lambda h: True)} ({len(hist)} ep, {s['wall_seconds']:.0f} s)",
        ]
        for v in names:
            done = out / g / v / f"s{seed}" / "result.json"
            if not done.exists():
                row += ["–", "–"]
                continue
            r = json.loads(done.read_text())
            row.append(
                f"{100 * max(c['mrr'] for c in r['curve']):.2f} / {100 * max(c['auc'] for c in r['curve']):.2f}"
                f" ({r['wall_s']:.0f} s)"
            )
            row.append(seal_best(lambda h, w=r["wall_s"], prep=s["prepare_seconds"]: prep + h["seconds"] <= w))
        rows.append(row)
    header = ["graph", "SEAL, 10 epochs (time)", "SEAL, whole run"]
    for v in names:
        header += [f"{v} (wall)", "SEAL within that wall"]
    return table(header, rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.own_graph_research.study")
    p.add_argument("--out", required=True)
    p.add_argument("what", choices=("variants", "stopping", "ensemble", "noise", "seal", "seedcap"))
    p.add_argument("--variants", default="dist")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--against", default="base", help="variants: the reference variant (default base)")
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    if args.what == "variants":
        print(variants_table(out, args.variants.split(","), args.seed, args.against))
    elif args.what == "seal":
        print(seal_table(out, ["base", *args.variants.split(",")]))
    elif args.what == "noise":
        print(noise_tables(out, args.variants.split(",")))
    elif args.what == "ensemble":
        print(ensemble_table(out, args.variants.split(",")[0]))
    elif args.what == "seedcap":
        print(seed_cap_table(out, args.variants.split(",")[0]))
    elif args.what == "stopping":
        print(stopping_table(out, args.variants.split(",")[0], args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
