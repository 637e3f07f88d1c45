import os

import pytest


@pytest.fixture
def qpath(tmp_path):
    """A fresh FileStorage path in a temporary directory."""
    return os.path.join(tmp_path, "queue.fs")
