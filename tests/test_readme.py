"""Every Python block of the README runs as written, in order, in an empty folder; and the
README's stated claims that a test can check match what the code does."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_blocks_run_as_written(tmp_path):
    blocks = python_blocks()
    assert len(blocks) >= 2, "the README's Python API examples are gone"
    script = tmp_path / "readme_blocks.py"
    # one interpreter, so the second block sees the first block's names, as a reader's session
    script.write_text("\n\n".join(blocks))
    r = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert (tmp_path / "ball.nrmodel").is_file()
    assert len(list((tmp_path / "shots").glob("ball_v*.nrbake"))) == 3
    moved = float(re.search(r"bottom moved ([0-9.e-]+) m", r.stdout).group(1))
    assert 1e-4 < moved < 0.5, r.stdout  # the push moves the ball, by less than its size
