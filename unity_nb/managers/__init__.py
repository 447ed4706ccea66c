"""Managers: slices of state behind natural-language APIs, and the registry that offers them to
the actor as ``primitives.<alias>.<method>``.

Every public loop method of a manager starts a tool loop and returns its handle at once; the
docstrings are the model-facing contract. Managers reach each other only through a shared
:class:`Registry` and each other's public methods.
"""

from ._base import Manager
from ._data import DataManager
from ._functions import FunctionsManager
from ._guidance import GuidanceManager
from ._knowledge import KnowledgeManager
from ._memory import MemoryManager
from ._registry import ManagerSpec, Registry
from ._secrets import SecretsManager
from ._tasks import Task, TasksManager, repair_history
from ._transcripts import TranscriptsManager

__all__ = (
    "Manager",
    "ManagerSpec",
    "Registry",
    "FunctionsManager",
    "KnowledgeManager",
    "DataManager",
    "TranscriptsManager",
    "GuidanceManager",
    "MemoryManager",
    "TasksManager",
    "Task",
    "repair_history",
    "SecretsManager",
)
