"""The notebooks in `examples/`: committed without outputs, and each runs top to bottom.

The run uses the quick setting (`KT_QUICK=1`: a few thousand sentence pairs, the tiny
preset, about a hundred steps), writes into a temporary folder and fails if a cell fails.
The notebooks share that folder as a reader's would, so notebook 2 trains the model that
notebooks 3 and 4 resume, already trained (as their text says).
"""

import os
import pathlib
import sys

import pytest

nbformat = pytest.importorskip("nbformat")

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
NAMES = [path.stem for path in NOTEBOOKS]
CORPUS = os.environ.get("KT_CORPUS", "/usr/share/trans/de-en")
CELL_TIMEOUT_SECONDS = 600


def test_the_five_notebooks_are_there():
    assert NAMES == [
        "01_quickstart",
        "02_inside_the_model",
        "03_decoding",
        "04_export_and_serve",
        "05_distributed_training",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
def test_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}, cell {index}: clear the outputs"
            assert cell.execution_count is None, f"{path.name}, cell {index}: execution count"
    assert notebook.metadata.kernelspec.name == "python3"


def test_the_kernel_is_this_python():
    """nbclient starts the `python3` kernel with the interpreter running the tests."""
    from jupyter_client import KernelManager

    command = KernelManager(kernel_name="python3").format_kernel_cmd()
    assert command[0] == sys.executable, (
        f"The `python3` kernel would run {command[0]}, not {sys.executable}: install "
        "ipykernel into this environment (`pip install ipykernel`) and remove other "
        "`python3` kernel specs (`jupyter kernelspec list`)."
    )


@pytest.fixture(scope="module")
def examples_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("examples")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isfile(CORPUS), reason=(
    f"the corpus {CORPUS} is missing: `apt-get install trans-de-en` or set KT_CORPUS"))
@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
def test_notebook_runs(path, examples_dir, tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    for name, value in {
        "KT_QUICK": "1",
        "KT_EXAMPLES_DIR": str(examples_dir),
        "MPLBACKEND": "Agg",
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KT_MODEL", raising=False)  # the notebooks train their own model
    working_dir = tmp_path / "cwd"
    working_dir.mkdir()
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_SECONDS,
        resources={"metadata": {"path": str(working_dir)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on failure
    assert sorted(os.listdir(working_dir)) == [], "notebooks write under KT_EXAMPLES_DIR only"
    assert (examples_dir / f"{path.stem}-quick").is_dir()
