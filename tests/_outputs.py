"""Shared by the crash-safety and full-disk tests: output comparison without timing fields."""

TIMING_KEYS = {"seconds", "built_at", "since", "started", "finished", "elapsed"}


def strip_timing(obj):
    """``obj`` (parsed JSON) without the keys that record when or how long, at any depth."""
    if isinstance(obj, dict):
        return {k: strip_timing(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [strip_timing(v) for v in obj]
    return obj
