"""tenset-curate: curate tensor-program performance datasets (TenSet, Ansor, MetaSchedule logs)."""

__version__ = "0.1.0"
