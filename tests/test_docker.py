"""The docker files cannot be built here (no engine), so check that they parse and agree with the repo."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
INSTRUCTIONS = {"FROM", "WORKDIR", "ENV", "COPY", "RUN", "EXPOSE", "CMD", "ENTRYPOINT", "ARG", "LABEL", "USER"}


def _instructions(path: Path) -> list[tuple[str, str]]:
    """Dockerfile -> [(INSTRUCTION, args)], joining continuation lines."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfiles_parse_and_copy_existing_paths():
    for name in ("preprocess.Dockerfile", "trainer.Dockerfile"):
        steps = _instructions(DOCKER / name)
        assert steps[0][0] == "FROM", name
        assert {w for w, _ in steps} <= INSTRUCTIONS, name
        for word, args in steps:
            if word == "COPY":
                for src in args.split()[:-1]:
                    assert (ROOT / src).exists(), f"{name}: COPY source {src} missing"


def test_images_split_cpu_and_gpu():
    pre = dict(_instructions(DOCKER / "preprocess.Dockerfile"))
    tr = dict(_instructions(DOCKER / "trainer.Dockerfile"))
    assert "cuda" not in pre["FROM"].lower() and "cpu" in pre["RUN"]
    assert "cuda" in tr["FROM"].lower()


def test_compose_wires_head_worker_job_trainer():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"ray-head", "ray-worker", "preprocess", "trainer"}
    assert "--head" in services["ray-head"]["command"]
    assert services["preprocess"]["command"][:3] == ["ray", "job", "submit"]
    assert "python" in services["preprocess"]["command"] and "preprocess" in services["preprocess"]["command"]
    assert services["trainer"]["depends_on"]["preprocess"]["condition"] == "service_completed_successfully"
    assert "-m trainer" in " ".join(services["trainer"]["command"])
    for svc in services.values():
        build = svc.get("build")
        if build:
            assert (DOCKER / build["context"] / build["dockerfile"]).exists()
