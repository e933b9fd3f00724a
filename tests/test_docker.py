"""The container files run what they say. Without a Docker engine the images cannot be built here (the build
test skips then), so the rest checks behaviour the files depend on: every command they run is accepted by
that program's real parser (Ray's click commands, preprocess's and the trainer's config builders), the
shell line that finds the newest shard set picks the newest complete one in a real folder tree, and the
images install the versions and packages the project declares."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.test_readme import parser_for

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"


def steps(path: Path) -> list[tuple[str, str]]:
    """Dockerfile -> [(INSTRUCTION, args)], continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    return [
        (line.split(" ", 1)[0].upper(), line.split(" ", 1)[1].strip())
        for line in map(str.strip, text.splitlines())
        if line and not line.startswith("#")
    ]


def exec_form(args: str) -> list[str]:
    return yaml.safe_load(args)  # a JSON array, which YAML reads too


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]


def ray_parses(words: list[str]) -> None:
    """`ray start ...` / `ray job submit ...` through Ray's own click commands (parsed, not run)."""
    from ray.dashboard.modules.job.cli import submit
    from ray.scripts.scripts import start

    assert words[0] == "ray", words
    if words[1] == "start":
        start.make_context("start", words[2:])
    else:
        assert words[1:3] == ["job", "submit"], words
        ctx = submit.make_context("submit", words[3:])
        job_parses(list(ctx.params["entrypoint"]))


def job_parses(words: list[str]) -> None:
    """A project command (python -m preprocess / trainer) through its parser and its config builder."""
    if words[0] == "torchrun":
        words = ["python", "-m", "trainer", *words[words.index("-m") + 2 :]]
    parser, rest = parser_for(words)
    args = parser.parse_args(rest)
    if words[2] == "preprocess":
        from preprocess.__main__ import config_from_args

        config_from_args(args)  # values too: --sampling, --views, ...
    else:
        from trainer.config import config_from_args

        config_from_args(rest)


def test_every_command_of_the_compose_file_parses():
    services = compose()
    for name in ("ray-head", "ray-worker", "preprocess"):
        ray_parses(services[name]["command"])
    # the trainer's command is a shell line: its shard set found by $(...), then torchrun
    line = services["trainer"]["command"][0].replace("$$", "$")
    words = shlex.split(re.sub(r'"\$\(dirname .*?\)"\)"', "/data/shards/citeseer/KEY", line))
    job_parses(words)


def test_every_command_of_the_images_parses():
    pre = dict(steps(DOCKER / "preprocess.Dockerfile"))
    ray_parses(exec_form(pre["CMD"]))
    tr = dict(steps(DOCKER / "trainer.Dockerfile"))
    job_parses([*exec_form(tr["ENTRYPOINT"]), *exec_form(tr["CMD"])])


def test_the_trainer_finds_the_newest_complete_shard_set(tmp_path):
    """The compose trainer's $(dirname $(ls -t .../*/manifest.json | head -n 1)), run by a real shell on a
    real tree: the newest set holding a manifest, never a set still being written (no manifest yet)."""
    line = compose()["trainer"]["command"][0].replace("$$", "$")
    found = re.search(r'"(\$\(dirname .*?\)"\))"', line).group(1).replace("/data", str(tmp_path))
    shards = tmp_path / "shards" / "citeseer"
    for key in ("old", "new", "partial"):
        (shards / key).mkdir(parents=True)
        (shards / key / "train-v000-00000.tar").write_bytes(b"x")
        if key != "partial":
            (shards / key / "manifest.json").write_text("{}")
        time.sleep(0.02)  # distinct mtimes: ls -t orders by them
    out = subprocess.run(["sh", "-c", f"printf '%s' {found}"], capture_output=True, text=True, check=True).stdout
    assert out == str(shards / "new")


def test_images_install_the_declared_versions_and_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pinned = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    pre, tr = (steps(DOCKER / f"{name}.Dockerfile") for name in ("preprocess", "trainer"))
    # the CPU image installs constraints.txt's torch, from the CPU wheel index
    assert f"torch=={pinned['torch']}" in dict(pre)["RUN"] and "whl/cpu" in dict(pre)["RUN"]
    # the GPU image keeps its base image's torch, which must meet pyproject's lower bound
    base = re.search(r"pytorch/pytorch:(\d+)\.(\d+)", dict(tr)["FROM"])
    need = re.search(r"torch>=(\d+)\.(\d+)", " ".join(project["project"]["dependencies"]))
    assert tuple(map(int, base.groups())) >= tuple(map(int, need.groups())), (base.group(0), need.group(0))
    # every package `pip install -e .` looks for is copied in, as are the files it reads
    packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    for name, image in (("preprocess", pre), ("trainer", tr)):
        copied = {src for word, args in image if word == "COPY" for src in args.split()[:-1]}
        assert set(packages) | {"pyproject.toml", "constraints.txt", "README.md"} <= copied, (name, copied)
        assert all((ROOT / src).exists() for src in copied), (name, copied)


def test_the_trainer_image_installs_the_projects_dependencies_but_no_ray(tmp_path):
    """The trainer image's own requirement step, run by a real shell on the project's pyproject.toml: every
    dependency but Ray, then the project itself without its dependencies."""
    run = dict(steps(DOCKER / "trainer.Dockerfile"))["RUN"]
    script = re.search(r'(python -c "import tomllib.*?") > /tmp/trainer-requirements.txt', run).group(1)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    listed = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert listed.split() == [d for d in deps if not d.startswith("ray")] and any(d.startswith("ray") for d in deps)
    assert "pip install --no-deps -e ." in run and "-r /tmp/trainer-requirements.txt" in run
    assert "'.[cluster]'" in dict(steps(DOCKER / "preprocess.Dockerfile"))["RUN"]  # ray job submit, the dashboard


def _engine() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _engine(), reason="no Docker engine reachable (docker info fails)")
def test_the_preprocess_image_builds_and_runs_its_cli():
    tag = "pencil-lp/preprocess:test"
    subprocess.run(
        ["docker", "build", "-f", str(DOCKER / "preprocess.Dockerfile"), "-t", tag, str(ROOT)], check=True, timeout=3600
    )
    proc = subprocess.run(
        ["docker", "run", "--rm", tag, "python", "-m", "preprocess", "--help"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "--sampling" in proc.stdout, proc.stderr[-2000:]
