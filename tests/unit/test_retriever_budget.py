"""Which collections the Retriever unloads past its memory budget (`deployments.retriever.evictions`)."""

from deployments.retriever import evictions


def test_within_the_budget_nothing_is_unloaded():
    assert evictions([("a", 10), ("b", 20)], 30, keep="b") == []


def test_the_least_recently_used_go_first_until_the_rest_fits():
    loaded = [("old", 40), ("mid", 30), ("new", 20), ("asked", 10)]  # least recently used first
    assert evictions(loaded, 60, keep="asked") == ["old"]
    assert evictions(loaded, 35, keep="asked") == ["old", "mid"]


def test_the_collection_just_asked_for_stays_even_alone_over_the_budget():
    assert evictions([("asked", 100), ("other", 5)], 50, keep="asked") == ["other"]
    assert evictions([("asked", 100)], 50, keep="asked") == []
