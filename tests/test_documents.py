"""Documents and folder copies through fsspec, on the local file system and on an in-memory one (as an object
store: no folders of its own, keys only)."""

from __future__ import annotations

import uuid

import fsspec
import pytest

from airflow_provider_wm.documents import copy_tree, read_document, write_document


@pytest.fixture(params=["local", "memory"])
def base(request, tmp_path) -> str:
    return str(tmp_path) if request.param == "local" else f"memory://wm-{uuid.uuid4().hex}"


def test_copy_tree_replaces_the_target_with_the_source_files_at_the_same_relative_paths(base):
    fs, _ = fsspec.core.url_to_fs(base)
    source, target = f"{base}/state-1/pending", f"{base}/state-2/pending"
    for folder in (f"{source}/sub", target):
        fs.makedirs(folder, exist_ok=True)
    fs.pipe({f"{source}/part-0.parquet": b"rows", f"{source}/_SUCCESS": b"", f"{source}/sub/part-1.parquet": b"more"})
    write_document(f"{source}/_wm_schema.json", {"rows": 2})
    fs.pipe({f"{target}/stale.parquet": b"from a failed try"})

    assert copy_tree(source, target) == 4

    copied = {path.rsplit("/pending/", 1)[1] for path in fs.find(target)}
    assert copied == {"part-0.parquet", "_SUCCESS", "sub/part-1.parquet", "_wm_schema.json"}
    assert fs.cat(f"{target}/sub/part-1.parquet") == b"more"
    assert read_document(f"{target}/_wm_schema.json") == {"rows": 2}
    assert fs.cat(f"{source}/part-0.parquet") == b"rows"  # the source stays
