"""The library's entry point for Python callers: run a sweep and get its ranked deployments back as typed objects."""

from spica_lib.api.search import SearchFailed, SearchOutcome, run_smart_search

__all__ = ["SearchFailed", "SearchOutcome", "run_smart_search"]
