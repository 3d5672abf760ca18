from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def shared_dataset(name: str) -> Path:
    path = SHARED / "datasets" / name
    if not path.is_dir():
        pytest.skip(f"{path} is absent: the shared test datasets are not checked out beside the project")
    return path
