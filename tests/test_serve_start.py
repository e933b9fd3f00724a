"""`pencil serve`'s start on a trained run (conftest's shop run: string ids), before Ray starts: a state folder the
service cannot write is refused in one line, and a log that an earlier version poisoned (an id that is no valid
Unicode text) replays without its bad entries, with a warning that says how many, and is left as it was."""

import json
import os
from pathlib import Path

import pytest

from tests.conftest import needs_ray
from tests.test_run_commands import SERVE, main_of, serve_args, served_log  # noqa: F401 - main_of: a fixture
from tests.test_run_inputs import files_of, one_error

pytestmark = needs_ray


def test_serve_refuses_a_state_folder_it_cannot_write_before_ray(shop_run, tmp_path, main_of, monkeypatch):
    """A folder of mode 555 (root ignores modes: then a sysfs folder, where nobody may create a file)."""
    import pipelines.serve.command as command

    monkeypatch.setattr(command, "run_service", lambda *a, **k: pytest.fail("Ray was started"))
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o555)
        state = tmp_path / "ro" / "state"
    elif Path("/sys/kernel").is_dir():
        state = Path("/sys/kernel/pencil-state")
    else:
        pytest.skip("root ignores file modes, and there is no /sys/kernel to stand for a read-only folder")
    line = one_error(*main_of(SERVE, serve_args(shop_run, state)))
    assert f"--state {state}: the service cannot write its edit log there" in line, line


def test_serve_replays_a_poisoned_log_without_its_bad_entries(shop_run, tmp_path, main_of, monkeypatch):
    import pipelines.serve.command as command

    monkeypatch.setattr(command, "run_service", lambda *a, **k: 0)
    log = served_log(shop_run, tmp_path / "state", edits=2)
    with open(log, "a") as f:  # what an earlier version accepted and logged: a lone surrogate, added then removed
        for seq, key in ((3, "add"), (4, "remove")):
            other = "remove" if key == "add" else "add"
            f.write(json.dumps({"seq": seq, key: [["u001", "\ud800"]], other: []}) + "\n")
    before = files_of(tmp_path)
    code, err = main_of(SERVE, serve_args(shop_run, tmp_path / "state"))
    assert code == 0 and "replaying 4 edit(s)" in err, err
    assert f"edit log {log}: 2 entries dropped at replay" in err, err
    assert files_of(tmp_path) == before
