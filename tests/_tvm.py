"""Shared by the TVM tests: is apache-tvm with MetaSchedule importable here?"""
import importlib.util

HAS_TVM = importlib.util.find_spec("tvm") is not None


def tvm_importable() -> bool:
    if not HAS_TVM:
        return False
    try:
        import tvm  # noqa: F401
        from tvm.s_tir import meta_schedule  # noqa: F401
    except Exception:  # pragma: no cover - broken installs
        return False
    return True
