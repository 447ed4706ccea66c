"""``python -m unity_nb``: an offline demo of a steerable loop with a nested child.

It uses a ScriptedModel (no network, no key): a parent loop researches two topics, each in
a child loop; while they run the demo pauses, interjects, asks and resumes, printing events.
With ``--model NAME`` (and OPENAI_API_KEY / OPENAI_BASE_URL) it runs against a real model.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import unity_nb as u

NOTES = {"tides": "Tides follow the moon; spring tides come at new and full moon.",
         "winds": "Trade winds blow east to west."}


def read_note(topic: str) -> str:
    """Return the stored note on a topic."""
    return NOTES.get(topic, "no note")


def _child_script(messages, tools):
    done = [m for m in messages if m["role"] == "tool"]
    if tools and not done:
        topic = messages[-1]["content"].split()[-1]
        return u.call_tool("read_note", topic=topic)
    return f"Summary: {done[-1]['content'] if done else 'nothing found'}"


def _parent_script(messages, tools):
    names = [t["function"]["name"] for t in tools]
    routing = [n for n in names if n.startswith("interject_")]
    if routing:
        return u.call_tool(routing[0], message="keep it short")
    done = [m for m in messages if m["role"] == "tool"]
    if tools and not done:
        return [u.call_tool("research", topic="tides"), u.call_tool("research", topic="winds")]
    return "Report:\n" + "\n".join(f"- {m['content']}" for m in done if m["content"].startswith("Summary"))


def _inspector(messages, tools):
    return "It is researching tides and winds in two sub-operations."


async def main(model_name: str | None) -> None:
    parent_model: u.Model
    child_model: u.Model
    inspector: u.Model
    if model_name:
        parent_model = child_model = inspector = u.OpenAIModel(model_name)
    else:
        parent_model = u.ScriptedModel(_parent_script, chunk=8, delay=0.05)
        child_model = u.ScriptedModel(_child_script, chunk=6, delay=0.05)
        inspector = u.ScriptedModel(_inspector)

    async def research(topic: str) -> u.LoopHandle:
        """Research a topic in a sub-operation and return its summary."""
        return u.start_loop(f"Research the topic {topic}", model=child_model, tools=[read_note],
                            name=f"research-{topic}")

    def show(event: u.Event) -> None:
        if event.kind == "model_delta":
            return
        detail = {k: v for k, v in event.model_dump().items() if k not in ("kind", "loop_id", "lineage", "ts", "seq")}
        indent = "  " * (len(event.lineage) - 1)
        print(f"{indent}{event.lineage[-1]:<24} {event.kind:<16} {json.dumps(detail, default=str)[:90]}")

    unsubscribe = u.default_bus().subscribe(show)
    h = u.start_loop("Write a short report on tides and winds.", model=parent_model, tools=[research], name="report")
    await h.wait_for("child_started")
    await h.pause()
    print(f"--> paused: {h!r}")
    await h.resume()
    await h.interject("Keep every summary to one line.")
    answer = await (await h.ask("What are you doing right now?", model=inspector)).result()
    print(f"--> asked, answer: {answer}")
    print(f"\n{await h}\n\n{h!r}, {h.tool_calls} tool calls, usage {h.usage}")
    unsubscribe()


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m unity_nb", description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a real model name (uses OPENAI_API_KEY / OPENAI_BASE_URL)")
    asyncio.run(main(parser.parse_args().model))


if __name__ == "__main__":
    cli()
