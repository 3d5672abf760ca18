"""Collections: named corpora in one storage root (`default` is the corpus as it was before collections).

A name becomes a directory (`collections/<name>/`), a scope in a key file and a field in requests and logs, so it
is kept to characters that mean the same in all of them: lower case, so two names never differ by case alone on a
case-insensitive filesystem; no `/`, `.`, `,` or whitespace, so it never escapes its directory or splits a scope list.
"""

from __future__ import annotations

import re

from app.errors import UserError

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def check_name(name: str) -> str:
    """`name` when it is a valid collection name, else UserError saying the rule."""
    if not NAME_RE.fullmatch(name):
        raise UserError(f"collection name {name!r}: use 1 to 63 lower-case letters, digits, '-' or '_', starting "
                        "with a letter or digit")
    return name
