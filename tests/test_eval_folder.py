"""Which ``--out`` folders ``attnlab eval`` continues (``eval_inputs.check_eval_folder``): new, empty, its own run of
the same model and settings, or a folder holding only eval's calibration cache (a recipe copies one calibration into
the folders of its other prompt formats); anything else is refused in one line, before the model loads."""

from __future__ import annotations

import pytest

from attnlab.errors import UserError
from attnlab.llm.eval.eval_settings import EvalSettings
from attnlab.llm.eval.eval_inputs import check_eval_folder


def test_new_empty_and_calibration_only_folders_start_a_run(tmp_path):
    settings = EvalSettings(model="m")
    assert check_eval_folder(tmp_path / "new", settings) is None
    (tmp_path / "empty").mkdir()
    assert check_eval_folder(tmp_path / "empty", settings) is None
    cached = tmp_path / "cached"
    cached.mkdir()
    (cached / "calibration-2048.npz").write_bytes(b"x")
    assert check_eval_folder(cached, settings) is None


@pytest.mark.parametrize("name", ["notes.txt", "calibration-2048.npz.bak", "calibration.npz"])
def test_a_folder_with_other_files_is_refused(tmp_path, name):
    (tmp_path / "calibration-2048.npz").write_bytes(b"x")
    (tmp_path / name).write_text("mine")
    with pytest.raises(UserError, match="not an attnlab eval run"):
        check_eval_folder(tmp_path, EvalSettings(model="m"))
