"""common.atomic: the whole file or nothing, and no temp file left behind."""

import pytest

from common.atomic import atomic_file


def test_the_file_appears_whole_and_only_on_success(tmp_path):
    target = tmp_path / "sub" / "out.json"
    with atomic_file(target, "w") as f:
        f.write("first")
        assert not target.exists()  # still the temp file beside it
    assert target.read_text() == "first"
    with pytest.raises(RuntimeError):
        with atomic_file(target, "w") as f:
            f.write("second, half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "first"  # the old file untouched
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]  # no temp file left
