"""Widget benchmark in a real kernel (jupyter_client), not a test.

Measures, while N operations stream at once:
  1. click latency: from the moment a Pause/Resume comm message is sent (as a browser sends
     it) to the moment the handle's steering event is published in the kernel;
  2. comm messages per second sent by one streaming handle's widget (the throttle caps it),
     beside the streamed deltas per second it coalesces.
  3. the same click latency with no operation running (baseline, same run).

Run: .venv/bin/python bench/bench_widget.py [--loops 20] [--clicks 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from jupyter_client.manager import start_new_kernel

SETUP = """
%load_ext unity_nb
import unity_nb as u

def chatter(messages, tools):
    return "token " * 4000   # streamed one piece at a time (about 20 s)

def stream_model():
    return u.ScriptedModel(chatter, chunk=6, delay=0.005)   # about 200 deltas/s per operation

_m = get_ipython().magics_manager.registry['UnityMagics']
_m.model = stream_model()
"""


class K:
    def __init__(self) -> None:
        self.km, self.kc = start_new_kernel(kernel_name="python3")

    def run(self, code: str) -> str:
        out: list[str] = []

        def hook(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                raise RuntimeError("\n".join(msg["content"]["traceback"]))

        self.kc.execute_interactive(code, timeout=120, output_hook=hook)
        return "".join(out)

    def value(self, expr: str):
        return json.loads(self.run(f"import json as _j; print(_j.dumps({expr}))").strip().splitlines()[-1])

    def click(self, comm_id: str, **content) -> float:
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": content}})
        t = time.time()
        self.kc.shell_channel.send(msg)
        return t

    def drain_iopub(self, seconds: float) -> list[dict]:
        msgs, end = [], time.time() + seconds
        while time.time() < end:
            try:
                msgs.append(self.kc.get_iopub_msg(timeout=max(0.01, end - time.time())))
            except Exception:
                pass
        return msgs

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def click_latencies(k: K, name: str, clicks: int) -> list[float]:
    comm_id, node = k.value(f"[_m.widgets['{name}'].model_id, _m.handles['{name}'].id]")
    out = []
    for i in range(clicks):
        action = "pause" if i % 2 == 0 else "resume"
        sent = k.click(comm_id, action=action, node=node)
        ts = k.value(
            f"(await _m.handles['{name}'].wait_for('steering', "
            f"lambda e: e.action == '{action}' and e.ts >= {sent}, timeout=30)).ts"
        )
        # the wait_for above returns the first matching event at or after the click
        out.append((ts - sent) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loops", type=int, default=20)
    ap.add_argument("--clicks", type=int, default=30)
    ap.add_argument("--window", type=float, default=3.0)
    args = ap.parse_args()
    k = K()
    try:
        k.run(SETUP)
        # baseline: one idle-ish operation, nothing else streaming
        k.run("_m.model = u.ScriptedModel(lambda m, t: (__import__('asyncio').Event().wait()), name='idle')")
        k.run("b = %unity act --name base wait")
        base = click_latencies(k, "base", args.clicks)
        k.run("await b.stop('done')")

        k.run("_m.model = stream_model()")
        k.run("\n".join(f"s{i} = %unity act --name s{i} stream" for i in range(args.loops)))
        k.run("await s0.wait_for('model_delta', timeout=30)")
        comm_id = k.value("_m.widgets['s1'].model_id")
        before = k.value("[_m.widgets['s1'].flushes, sum(1 for e in s1.events if e.kind == 'model_delta')]")
        msgs = k.drain_iopub(args.window)
        after = k.value("[_m.widgets['s1'].flushes, sum(1 for e in s1.events if e.kind == 'model_delta')]")
        comm_msgs = sum(1 for m in msgs if m["msg_type"] == "comm_msg" and m["content"].get("comm_id") == comm_id)
        deltas = after[1] - before[1]
        busy = click_latencies(k, "s0", args.clicks)
        k.run("\n".join(f"await s{i}.stop('bench over')" for i in range(args.loops)))
    finally:
        k.close()

    def row(label, xs):
        xs = sorted(xs)
        return f"| {label} | {statistics.median(xs):.1f} | {xs[int(0.9 * (len(xs) - 1))]:.1f} | {len(xs)} |"

    print(f"\n## Widget benchmark ({args.loops} operations streaming, {args.clicks} clicks)\n")
    print("| click -> handle method ran | median ms | p90 ms | n |\n| --- | --- | --- | --- |")
    print(row("no other operation running (baseline)", base))
    print(row(f"{args.loops} operations streaming", busy))
    print(f"\n| one streaming handle over {args.window:.0f} s | per second |\n| --- | --- |")
    print(f"| streamed deltas coalesced | {deltas / args.window:.0f} |")
    print(f"| widget comm messages sent (iopub comm_msg) | {comm_msgs / args.window:.1f} |")
    print(f"| widget flushes | {(after[0] - before[0]) / args.window:.1f} |")


if __name__ == "__main__":
    main()
