"""The tools :class:`._tasks.TasksManager` gives the model: a task's own (child tasks) and its loops' (the tasks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ("manager_tools", "task_tools")


def task_tools(manager: Any, task_id: str) -> list[Callable[..., Any]]:
    """The tools a task's own loop gets: start child tasks, message them (``manager``: its :class:`TasksManager`)."""

    def spawn(name: str, description: str, share: bool | None) -> str:
        child = manager.create(name, description, parent=task_id, parent_context=share)
        manager._schedule(child.id)
        return f"started child task {child.id} ({child.name!r}); its result will arrive as a message"

    async def spawn_task(name: str, description: str) -> str:
        """Start a child task that runs on its own; its final response arrives here as a
        message when its turn ends (this task is woken for it if idle)."""
        return spawn(name, description, None)

    async def spawn_task_sharing(name: str, description: str, include_parent_context: bool = False) -> str:
        """Start a child task that runs on its own; its final response arrives here as a
        message when its turn ends (this task is woken for it if idle).
        ``include_parent_context``: true if the child should see this conversation."""
        return spawn(name, description, bool(include_parent_context))


    async def message_task(child_id: str, message: str) -> str:
        """Send a message to one of your child tasks (it resumes with a new turn if idle)."""
        child = manager._row(child_id)
        if child["parent_id"] != task_id:
            children = [t.id for t in manager.list(parent=task_id)]
            raise ValueError(f"{child_id} is not a child of this task; children: {children}")
        manager.send(child_id, message, type="user", sender=task_id)
        return f"sent to {child_id}"

    if manager.parent_context == "model":
        spawn_task_sharing.__name__ = spawn_task_sharing.__qualname__ = "spawn_task"
        return [spawn_task_sharing, message_task]
    return [spawn_task, message_task]


def manager_tools(manager: Any) -> list[Callable[..., Any]]:
    """The tools of the manager's own loops (``ask``, ``update``): list, read, create, edit and reorder tasks."""

    def list_tasks() -> list[dict]:
        """Every task: id, name, status, parent and the start of its description and result."""
        return [{"id": t.id, "name": t.name, "status": t.status, "parent": t.parent_id,
                 "description": t.description[:200], "result": (t.result or "")[:200]} for t in manager.list()]

    def get_task(task_id: str) -> dict:
        """One task with its turn summaries."""
        t = manager.get(task_id)
        return {"id": t.id, "name": t.name, "status": t.status, "description": t.description, "result": t.result,
                "turns": [{"turn": x["turn"], "summary": x["summary"]} for x in manager.turns(task_id)]}

    def create_task(name: str, description: str, parent: str | None = None) -> dict:
        """Create a task (not started)."""
        t = manager.create(name, description, parent=parent)
        return {"id": t.id, "name": t.name}

    def edit_task(task_id: str, name: str | None = None, description: str | None = None) -> dict:
        """Rename a task or change its description."""
        t = manager.edit(task_id, name=name, description=description)
        return {"id": t.id, "name": t.name, "description": t.description}

    def reorder_tasks(task_ids: list[str]) -> list[str]:
        """Put these tasks first, in this order."""
        return [t.id for t in manager.reorder(task_ids)]

    return [list_tasks, get_task, create_task, edit_task, reorder_tasks]
