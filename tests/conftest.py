"""Suite-wide settings: a private decoded-image cache, and a non-interactive matplotlib."""

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True, scope="session")
def private_data_cache(tmp_path_factory):
    """Tests never write into the user's ~/.cache/reluattn (one cache folder for the whole session)."""
    previous = os.environ.get("RELUATTN_CACHE")
    os.environ["RELUATTN_CACHE"] = str(tmp_path_factory.mktemp("reluattn-cache"))
    yield
    if previous is None:
        os.environ.pop("RELUATTN_CACHE", None)
    else:
        os.environ["RELUATTN_CACHE"] = previous
