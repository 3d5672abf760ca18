"""Every test belongs to exactly one tier, given by the directory it lives in (tests/<tier>/); the tiers are the
markers registered in pyproject.toml. `quality` runs only when asked for by name (`-m quality`): it is a
measurement, never part of CI."""

from __future__ import annotations

from pathlib import Path

import pytest

# Run order: the quick tier first; e2e before integration, because `ray up`/`ray down` stop every Ray on this
# machine and so the e2e test refuses to run beside one, such as the integration tier's session cluster.
TIERS = ("unit", "e2e", "integration", "gpu", "quality")
TESTS = Path(__file__).resolve().parent


def tier_of(item: pytest.Item) -> str:
    tier = Path(item.path).resolve().relative_to(TESTS).parts[0]
    if tier not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: a test lives in tests/<tier>/, the tier being one of {TIERS}")
    return tier


@pytest.hookimpl(tryfirst=True)  # mark first, so that `-m` then filters on the tier markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    quality_asked = "quality" in (config.getoption("markexpr") or "")
    tiers = {item: tier_of(item) for item in items}
    for item, tier in tiers.items():
        item.add_marker(tier)
    deselected = [item for item in items if tiers[item] == "quality" and not quality_asked]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    skip = set(deselected)
    items[:] = sorted((item for item in items if item not in skip), key=lambda item: TIERS.index(tiers[item]))
