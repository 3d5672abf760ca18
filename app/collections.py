"""Collections: named corpora in one storage root, each with its own dataset, index and ingest-run versions.

    <root>/datasets, indexes, runs/ingest, quarantine    the `default` collection: today's layout, read in place
    <root>/collections/<name>/datasets, indexes, ...     any other collection, the same layout one level down

A collection is a storage root of its own (`storage_of`), so the ingest pipeline, the catalog and the index read
and write it as they do the default; models, keys and training runs stay in the root, shared. A collection exists
once something is ingested into it (its directory exists); `default` always exists.
"""

from __future__ import annotations

import re

from app.errors import UserError
from app.storage import Storage

DEFAULT = "default"
DIR = "collections"
# Lower case only, so "HR" and "hr" can never be two collections (nor one key's scope read as another's), and no
# "/", "." or "..": a name is a single directory, never a path.
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise UserError(f"collection name {name!r}: use 1 to 63 lower-case letters, digits, '-' or '_', starting "
                        "with a letter or digit")
    return name


def storage_of(root: Storage, name: str) -> Storage:
    """The storage root of collection `name` (the root itself for the default)."""
    check_name(name)
    return root if name == DEFAULT else Storage(f"{root.uri.rstrip('/')}/{DIR}/{name}")


def names(root: Storage) -> list[str]:
    """The collections that exist, `default` first."""
    return [DEFAULT, *(n for n in root.listdir(DIR) if n != DEFAULT and NAME_RE.fullmatch(n))]
