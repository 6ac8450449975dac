"""One notebook, graded: run its cells in a fresh kernel in its private folder, and judge, in this
process, every answer its checking cells registered.

The kernel is started with its ``PYTHONPATH`` at the private copy of the packages; before the first
cell the grader runs ``lessonkit.kernel.start()`` there, out of the notebook's sight (a silent request:
no history, no output), and checks the packages came from that copy. After each cell it asks which
answers were registered (``pending()``) and judges each (``lessonkit.judge``) in a worker thread of
this process, whose ``Remote`` calls are silent requests to the kernel. After the last cell it looks
up each exercise's stub name as well (``final()``), so an answer whose checking cell was deleted is
graded too.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import subprocess
import threading
import time
from dataclasses import dataclass, field

from .. import judge as judging
from ..exercises import catalogue, registered
from ..i18n import notebook_language
from .sandbox import Leftovers, Private, Snapshot

__all__ = ["GRACE", "Context", "Outcome", "run_notebook"]

GRACE = 15.0                  # seconds an interrupted kernel has to answer before it is stopped
_KERNEL = "__import__('lessonkit.kernel', fromlist=['start'])"


@dataclass
class Context:
    """What every notebook of one grading run shares."""

    snapshot: Snapshot
    timeout: float
    seed: int
    hidden: int = judging.HIDDEN_CASES
    leftovers: Leftovers | None = None
    launch: threading.Lock = field(default_factory=threading.Lock)
    kernels: set = field(default_factory=set)       # pids of the kernels grading now


@dataclass
class Outcome:
    """What running one notebook gave: every judgement, and what happened on the way."""

    judgements: list = field(default_factory=list)      # (cell or None, Judgement)
    cells: int = 0
    cells_run: int = 0
    timed_out: set = field(default_factory=set)
    errors: dict = field(default_factory=dict)          # cell -> "TypeName: first line"
    notes: list = field(default_factory=list)
    predictions: list = field(default_factory=list)     # [what, prediction, result] of the reveal cells
    stopped: str | None = None                          # why the run ended early


class _Stopped(Exception):
    """The run cannot go on (the kernel died, or ignored an interrupt)."""


def nbclient_modules():
    try:
        import nbclient  # noqa: PLC0415  (the [grade] extra: needed only here)
        import nbformat  # noqa: PLC0415
        from nbclient.exceptions import DeadKernelError  # noqa: PLC0415
    except ImportError as exc:
        raise ValueError(f"grading needs nbclient, nbformat and ipykernel: pip install -e \".[grade]\" "
                         f"({exc.name} is missing)") from None
    return nbclient, nbformat, DeadKernelError


def _make_client(nbclient, nb, timeout: float):
    class Client(nbclient.NotebookClient):
        """nbclient's executor, noting which cells ran over the limit; outputs are not kept
        (only the judge counts), so a cell that prints without end cannot fill the memory."""

        current = -1
        timed_out: set[int]

        async def _async_handle_timeout(self, timeout, cell=None):
            self.timed_out.add(self.current)
            return await super()._async_handle_timeout(timeout, cell)

        def output(self, outs, msg, display_id, cell_index):
            return None

    client = Client(nb, timeout=math.ceil(timeout), kernel_name="python3", allow_errors=True,
                    interrupt_on_timeout=True, record_timing=False, shutdown_kernel="immediate",
                    error_on_timeout={"ename": "TimeoutError", "evalue": f"the cell ran over {timeout:g} s "
                                      "and was interrupted", "traceback": []})
    client.timed_out, client.errors = set(), {}

    def on_cell_error(cell, cell_index, execute_reply):
        content = execute_reply["content"]
        first = (str(content.get("evalue", "")).splitlines() or [""])[0]
        client.errors[cell_index] = f"{content.get('ename', 'error')}: {first}"[:200]

    client.on_cell_error = on_cell_error
    return client


async def _reply(client, msg_id: str, within: float) -> dict | None:
    """The shell reply to ``msg_id``, or None if none comes within ``within`` seconds."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = await client.kc.shell_channel.get_msg(timeout=left)
        except Exception:  # noqa: BLE001 - queue.Empty (jupyter_client raises it as is) or a closed channel
            return None
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg
    return None


class _Kernel:
    """Silent requests to the kernel: an expression in, the string it evaluates to out."""

    def __init__(self, client, timeout: float):
        self.client, self.timeout = client, timeout
        self.lost: str | None = None

    async def ask(self, expression: str, within: float | None = None, interrupt: bool = True) -> str:
        if self.lost:
            raise judging.KernelLost(self.lost)
        within = self.timeout if within is None else within
        msg_id = self.client.kc.execute("", silent=True, store_history=False, user_expressions={"r": expression})
        reply = await _reply(self.client, msg_id, within)
        if reply is None and interrupt:
            await self.client.km.interrupt_kernel()
            reply = await _reply(self.client, msg_id, GRACE)
            if reply is None:
                self.lost = f"the kernel ignored the interrupt after {within:g} s, so it was stopped"
                raise judging.KernelLost(self.lost)
        if reply is None:
            self.lost = "the kernel did not answer the grader"
            raise judging.KernelLost(self.lost)
        result = reply["content"].get("user_expressions", {}).get("r", {})
        if result.get("status") != "ok":
            if result.get("ename") == "KeyboardInterrupt":
                raise judging.CallTimedOut("interrupted")
            raise judging.Tampered(f"the grader's harness in the kernel failed: {result.get('ename')}: "
                                   f"{str(result.get('evalue'))[:200]}")
        try:
            text = ast.literal_eval(result.get("data", {}).get("text/plain", ""))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            text = None
        if not isinstance(text, str):
            raise judging.Tampered("the grader's harness in the kernel answered with something that is not text")
        return text


async def _judge_pending(kernel: _Kernel, ctx: Context, out: Outcome, cell: int | None, expression: str,
                         checkers: dict, done: set) -> None:
    loop = asyncio.get_running_loop()
    try:
        listed = json.loads(await kernel.ask(expression, within=60, interrupt=False))
    except (ValueError, judging.Tampered, judging.CallTimedOut) as exc:
        out.notes.append(f"the grader could not list the answers after cell {cell}: {exc}"[:300])
        return
    for item in listed if isinstance(listed, list) else []:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], int) and item[1] in checkers):
            continue
        index, number, kind, value = item
        if (index, number) in done:
            continue
        done.add((index, number))

        def send(request: str, index=index) -> str:
            future = asyncio.run_coroutine_threadsafe(kernel.ask(f"{_KERNEL}.call({index}, {request!r})"), loop)
            return future.result()

        try:
            answer = judging.Remote(send, number) if kind == "function" else judging.wire.decode(value)
        except judging.wire.WireError:
            continue
        verdict = await asyncio.to_thread(_judge_alone, number, checkers[number], answer, ctx)
        out.judgements.append((cell, verdict))


# Checkers touch process-wide state while they build a reference (the default dtype, a counting wrapper
# around backend.matmul): with --jobs, one judge at a time. The notebooks still run side by side.
_JUDGING = threading.Lock()


def _judge_alone(number: str, checker, answer, ctx: Context):
    with _JUDGING:
        return judging.judge(number, checker, answer, seed=ctx.seed, hidden=ctx.hidden)


def _checkers_by_exercise() -> dict:
    by_name = {name.split(".", 1)[1]: c for name, c in registered().items()}
    return {e.number: by_name[e.checker.split(".", 1)[1]] for e in catalogue.EXERCISES}


async def _run(client, nb, box: Private, ctx: Context, lesson: int | None, out: Outcome, DeadKernelError) -> None:
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    out.cells = len(code_cells)
    checkers = _checkers_by_exercise()
    stubs = {e.number: e.stub for e in (catalogue.for_lesson(lesson) if lesson is not None else catalogue.EXERCISES)}
    kernel, done = _Kernel(client, ctx.timeout), set()
    client.km = client.create_kernel_manager()
    pid = None
    with ctx.launch:           # the leftover sweep of another notebook must not take this kernel for an orphan
        await client.async_start_new_kernel(cwd=str(box.work), env=box.env(notebook_language(nb.metadata)),
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = _kernel_pid(client)
        if pid is None:
            ctx.leftovers = None   # a kernel this jupyter_client does not name: sweeping could stop it, so never sweep
        ctx.kernels.add(pid)
    try:
        await client.async_start_new_kernel_client()
        try:
            started = json.loads(await kernel.ask(f"{_KERNEL}.start()", within=120, interrupt=False))
        except (ValueError, judging.KernelLost, judging.Tampered, judging.CallTimedOut) as exc:
            raise _Stopped(f"the grader could not start its harness in the kernel ({exc})") from None
        if not all(box.imported_from_here(started.get(k, "")) for k in ("minitransformer", "lessonkit")):
            raise _Stopped("the kernel imported the packages from somewhere other than its private copy "
                           f"({started.get('minitransformer')})")
        executed = 0
        for index in code_cells:
            client.current = index
            try:
                await client.async_execute_cell(nb.cells[index], index, execution_count=executed + 1)
            except DeadKernelError:
                raise _Stopped(f"the kernel died in cell {index}") from None
            executed += 1
            out.cells_run = executed
            if index in client.timed_out and await _reply(client, client.kc.kernel_info(), within=GRACE) is None:
                raise _Stopped(f"cell {index} ignored the interrupt after {ctx.timeout:g} s, so the kernel was stopped")
            await _judge_pending(kernel, ctx, out, index, f"{_KERNEL}.pending()", checkers, done)
        await _judge_pending(kernel, ctx, out, None, f"{_KERNEL}.final({json.dumps(stubs)!r})", checkers, done)
        try:
            listed = json.loads(await kernel.ask(f"{_KERNEL}.predictions()", within=60, interrupt=False))
            out.predictions = [p for p in listed if isinstance(p, list) and len(p) == 3][:100]
        except (ValueError, judging.Tampered, judging.CallTimedOut):
            pass
    except judging.KernelLost as exc:
        raise _Stopped(str(exc)) from None
    finally:
        try:
            if client.km is not None:
                await client._async_cleanup_kernel()
        finally:
            with ctx.launch:
                ctx.kernels.discard(pid)
                if ctx.leftovers is not None:
                    stopped = ctx.leftovers.stop(keep=set(ctx.kernels))
                    if stopped:
                        out.notes.append(f"{stopped} process{'es' if stopped > 1 else ''} the notebook left running "
                                         f"{'were' if stopped > 1 else 'was'} stopped")


def _kernel_pid(client) -> int | None:
    provisioner = getattr(client.km, "provisioner", None)
    process = getattr(provisioner, "process", None)
    return getattr(process, "pid", None)


def run_notebook(nb, lesson: int | None, ctx: Context) -> Outcome:
    """Run ``nb`` (a NotebookNode) in a fresh kernel in a private folder; judge its answers."""
    nbclient, _, DeadKernelError = nbclient_modules()
    out = Outcome()
    client = _make_client(nbclient, nb, ctx.timeout)
    with Private(ctx.snapshot) as box:
        try:
            asyncio.run(_run(client, nb, box, ctx, lesson, out, DeadKernelError))
        except _Stopped as exc:
            out.stopped = str(exc)
        except Exception as exc:  # noqa: BLE001 - whatever the notebook did to its kernel, the others still get graded
            out.stopped = f"the grader lost the kernel after cell {out.cells_run} ({type(exc).__name__}: {exc})"[:300]
    out.timed_out, out.errors = set(client.timed_out), dict(client.errors)
    return out
