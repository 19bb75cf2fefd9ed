from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "01_quickstart.ipynb"


def test_quickstart_notebook_runs_without_errors(tmp_path):
    """Executes every cell with the current interpreter's kernel; any error fails the test."""
    import sys

    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    nb = nbformat.read(NOTEBOOK, as_version=4)
    ksm = KernelSpecManager()
    try:
        ksm.get_kernel_spec("python3")
        kernel = "python3"
        km = None
    except NoSuchKernel:  # no installed spec: start this interpreter's ipykernel directly
        from jupyter_client.manager import KernelManager

        kernel = None
        km = KernelManager(
            kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        )
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name=kernel or "python3",
        km=km,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
