"""`ConfigError`, in a module of its own so that every module of `training` can raise it without importing the
configuration (it is re-exported by `grpo_tools.training.configs`, where users import it from)."""

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A recipe or flag that cannot work; the message names the setting."""
