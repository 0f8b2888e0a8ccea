"""Shared pytest fixtures: where the build is, and the kernelspecs it wrote."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CELLVM_BUILD", ROOT / "build")).resolve()

# Every Jupyter tool in the tests finds our kernelspecs without installing them.
os.environ["JUPYTER_PATH"] = str(BUILD / "share" / "jupyter")


@pytest.fixture(scope="session", autouse=True)
def private_data_home(tmp_path_factory):
    """Gateways started by the tests put artifacts under $XDG_DATA_HOME/cellvm/artifacts:
    a temporary one, never the user's ~/.local/share. Tests may still pass their own."""
    old = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg-data"))
    yield
    if old is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = old


@pytest.fixture(scope="session")
def build_dir():
    return BUILD


@pytest.fixture(scope="session")
def kernel_bin():
    p = BUILD / "cellvm-kernel"
    if not p.exists():
        pytest.fail(f"{p} is missing: run `make` first")
    return p


@pytest.fixture(scope="session")
def gateway_bin():
    p = BUILD / "cellvm-gateway"
    if not p.exists():
        pytest.fail(f"{p} is missing: run `make` first")
    return p
