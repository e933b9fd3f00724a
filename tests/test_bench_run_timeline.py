"""bench.run_timeline on a hand-made run: a recipe log and trainer logs in the layout `pencil run --preset auto`
writes, with the phases, the processes and the idle core-seconds computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.run_timeline import phases, spans, timeline


def at(s: float) -> str:
    """A log time stamp s seconds after 12:00:00."""
    m, sec = divmod(s, 60)
    return f"2026-12-04 12:{int(m):02d}:{sec:06.3f}".replace(".", ",")


def write(path: Path, lines: list[tuple[float, str]], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{at(t)} {text}\n" for t, text in lines) + tail)


@pytest.fixture
def run(tmp_path) -> tuple[Path, Path]:
    log = tmp_path / "auto.log"
    write(
        log,
        [
            (0, "INFO common.datasets.tables: g.csv: read 10 rows"),
            (10, "INFO pipelines.auto: search: 3 candidate(s) to epoch 2 of 10 / 2 of 10 / 2 of 10, 3 to train"),
            (40, "INFO pipelines.auto: search: 2 candidate(s) to epoch 10 of 10 / 10 of 10 or convergence"),
            (100, "INFO pipelines.auto: search: deep-d2n10 (deep-d2n10 beats default-d1n20 by 0.1 > 1 SE)"),
            (160, "INFO pipelines: wrote /r/results.json, /r/report.md"),
        ],
    )
    folder = tmp_path / "original"
    start = "[rank 0] INFO trainer: PENCIL trainer: attention backend bucketed"
    best = "[rank 0] INFO trainer: new best valid mrr 0.5 at epoch 1"
    resume = "[rank 0] INFO trainer: resuming from last.pt"
    # default: grace 12-25, then resumed 42 (its "resuming" line 1 s before the start-up line) to 60
    default = [(12, start), (25, best), (41, resume), (42, start), (60, best)]
    write(folder / "search/default-d1n20-aa/trainer.log", default)
    # deep: grace 12-38, then 42-98; wide: grace 27-37; the JSON summary a trainer prints has no stamp
    deep = [(12, start), (38, best), (42, start), (98, best)]
    write(folder / "search/deep-d2n10-bb/trainer.log", deep, '{\n "x": 1\n}\n')
    write(folder / "search/wide-d1n50-cc/trainer.log", [(27, start), (37, best)])
    evaluation = "[rank 0] INFO trainer: --eval-weights: evaluating best.pt"
    write(folder / "seed0/trainer.log", [(102, evaluation), (104, best)])
    write(folder / "seed1/trainer.log", [(102, start), (150, best)])
    write(folder / "seed2/trainer.log", [(106, start), (154, best)])
    return log, folder


def test_phases_and_processes_by_hand(run):
    log, folder = run
    base = phases(log)[0][1]
    assert [(n, a - base, b - base) for n, a, b in phases(log)] == [
        ("shard sets", 0, 10),
        ("grace rung", 10, 40),
        ("convergence rung", 40, 100),
        ("final seeds, blend, report", 100, 160),
    ]
    got = sorted((n, s - base, e - base) for n, s, e in spans(folder))
    assert got == [
        ("search/deep-d2n10-bb", 12, 38),
        ("search/deep-d2n10-bb", 42, 98),
        ("search/default-d1n20-aa", 12, 25),
        ("search/default-d1n20-aa", 41, 60),
        ("search/wide-d1n50-cc", 27, 37),
        ("seed0", 102, 104),
        ("seed1", 102, 150),
        ("seed2", 106, 154),
    ]


def test_idle_core_seconds_by_hand(run):
    rows = timeline(*run, slots=2)
    # shard sets: 2 x 10 idle; grace: 2 x 30 - (13 + 26 + 10); convergence: 2 x 60 - (19 + 56);
    # final: 2 x 60 - (2 + 48 + 48)
    assert [[r[0], float(r[1]), r[2], float(r[3]), float(r[4])] for r in rows] == [
        ["shard sets", 10.0, 0, 0.0, 20.0],
        ["grace rung", 30.0, 3, 49.0, 11.0],
        ["convergence rung", 60.0, 2, 75.0, 45.0],
        ["final seeds, blend, report", 60.0, 3, 98.0, 22.0],
    ]


def test_an_unfinished_run_is_refused_in_one_line(run, tmp_path):
    log, _ = run
    cut = tmp_path / "cut.log"
    cut.write_text("".join(log.read_text().splitlines(keepends=True)[:3]))
    with pytest.raises(SystemExit, match="not a finished --preset auto run"):
        phases(cut)
