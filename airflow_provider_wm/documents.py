"""Small JSON documents (requests, manifests, state) at a path or any fsspec URL, written atomically.

Pure Python and fsspec: the Spark jobs use it as well as the Airflow side, so a manifest is written the same
way by a spark-submit driver and by a task in connect mode.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

__all__ = ["copy_tree", "delete_tree", "exists", "read_document", "write_document"]


def read_document(url: str, **storage_options: Any) -> Any | None:
    """The JSON document at ``url``, or None when there is none. A document that is not JSON fails with an
    error naming ``url``."""
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    try:
        with fs.open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except FileNotFoundError:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{url} is not a JSON document ({exc}); it holds {text[:120]!r}") from None


def write_document(url: str, payload: Any, **storage_options: Any) -> None:
    """Write ``payload`` as JSON so that a reader sees the old document or the new one, never half of one:
    a temporary file renamed over the target locally, one PUT on an object store."""
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    data = json.dumps(payload, indent=2, sort_keys=True, default=str).encode("utf-8")
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    if isinstance(fs, LocalFileSystem):
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    else:
        fs.pipe_file(path, data)


def exists(url: str, **storage_options: Any) -> bool:
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    return bool(fs.exists(path))


def delete_tree(url: str, **storage_options: Any) -> bool:
    """Delete a file or folder tree; False when there was nothing."""
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    if not fs.exists(path):
        return False
    fs.rm(path, recursive=True)
    return True


def copy_tree(source: str, target: str, **storage_options: Any) -> int:
    """Replace the folder ``target`` with a copy of the files under ``source`` (same relative paths), file by
    file; returns how many were copied. Both on one file system (one URL protocol)."""
    fs, source_path = fsspec.core.url_to_fs(source, **storage_options)
    target_path = fsspec.core.url_to_fs(target, **storage_options)[1].rstrip("/")
    source_path = source_path.rstrip("/")
    files = fs.find(source_path)
    if fs.exists(target_path):
        fs.rm(target_path, recursive=True)
    fs.makedirs(target_path, exist_ok=True)
    for file in files:
        relative = file[len(source_path) :].lstrip("/")
        fs.makedirs(f"{target_path}/{relative}".rsplit("/", 1)[0], exist_ok=True)
        fs.copy(file, f"{target_path}/{relative}")
    return len(files)
