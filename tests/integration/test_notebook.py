"""The example notebooks (examples/*.ipynb) run from start to end without an error.

Each runs in a fresh kernel whose working directory is a temporary folder (a notebook that read
the repository's layout would fail here) and whose ``gpframe`` is the one under test.
"""

import os
import sys
import time
from pathlib import Path

import pytest

import gpframe

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def _kernel() -> tuple[str, object]:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec("python3")
        return "python3", None
    except NoSuchKernel:  # no installed spec: start this interpreter's ipykernel directly
        from jupyter_client.manager import KernelManager

        return "python3", KernelManager(
            kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        )


def test_examples_folder_has_the_tutorials():
    names = [p.name[:2] for p in NOTEBOOKS]
    assert names == ["01", "02", "03", "04", "05", "06", "07"], [p.name for p in NOTEBOOKS]
    assert not list(EXAMPLES.glob("*.py")), "examples are notebooks (run by this test)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_errors(path, tmp_path, monkeypatch):
    """Executes every cell with the current interpreter's kernel; any error fails the test."""
    # the kernel imports the gpframe under test (the checkout), not another installed copy
    root = str(Path(gpframe.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    kernel, km = _kernel()
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name=kernel, km=km,
        resources={"metadata": {"path": str(tmp_path)}},
    )  # fmt: skip
    t0 = time.perf_counter()
    client.execute()
    print(f"{path.name}: {time.perf_counter() - t0:.1f} s")
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
    # nothing written beside the notebooks (each writes into its own temporary folder)
    assert sorted(p.name for p in EXAMPLES.iterdir()) == sorted(
        p.name for p in EXAMPLES.iterdir() if p.suffix == ".ipynb" or p.name == "README.md"
    )


def test_every_notebook_opens_with_its_question_and_ends_with_the_ledger():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        first, last = nb.cells[0], nb.cells[-1]
        assert first.cell_type == "markdown" and first.source.startswith("# "), path.name
        if path.name.startswith("01"):
            assert "ledger" in nb.cells[-2].source.lower(), path.name
        else:
            assert "**Question:**" in first.source, path.name
        assert last.cell_type == "code" and "report" in last.source, path.name
