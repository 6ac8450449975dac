"""Progress output of a training run that fits where it goes: a live bar on a terminal,
plain lines on a pipe or in a log file, nothing at all when asked.

The training loop (train.py) calls ``update`` once per step, ``result`` for a
validation, ``warn`` for a warning; where each goes is decided here, once.
"""

from __future__ import annotations

import math
import sys
import time


class Progress:
    """Progress output that fits where it goes.

    mode "bar": a live tqdm bar (on a terminal). "lines": a plain line every
    ``every`` seconds, no carriage returns (a pipe or a log file). "off":
    nothing per step. Validation results go to standard output in every mode;
    the bar and the periodic lines go to ``stream`` (standard error).
    """

    def __init__(self, mode: str, total: int, initial: int, every: float = 30.0, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "bar" if isatty is not None and isatty() else "lines"
        if mode not in ("bar", "lines", "off"):
            raise ValueError(f"progress must be 'auto', 'bar', 'lines' or 'off', got {mode!r}")
        if not (isinstance(every, int | float) and math.isfinite(every) and every > 0):
            raise ValueError(f"progress interval must be a positive number of seconds, got {every!r}")
        self.mode, self.total, self.every = mode, total, float(every)
        self.bar = None
        if mode == "bar":
            from tqdm.auto import tqdm  # noqa: PLC0415

            self.bar = tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True,
                            file=self.stream)
        self._t_start = self._t_last = time.perf_counter()
        self._postfix: dict = {}

    def update(self, step: int, record: dict | None) -> None:
        if record is not None and record.get("loss") is not None:
            self._postfix = {"loss": f"{record['loss']:.3f}", "tok_s": f"{record['tokens_per_s']:.0f}",
                             "lr": f"{record['lr']:.2e}" if record.get("lr") is not None else "-"}
        if self.bar is not None:
            self.bar.update(1)
            if record is not None and self._postfix:
                self.bar.set_postfix(self._postfix)
        elif self.mode == "lines":
            now = time.perf_counter()
            if now - self._t_last >= self.every or step == self.total:
                self._t_last = now
                self.line(f"step {step}/{self.total}"
                          + "".join(f", {k} {v}" for k, v in self._postfix.items())
                          + f", {now - self._t_start:.0f}s")

    def line(self, text: str) -> None:
        """A line of progress on the progress stream."""
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        elif self.mode == "lines":
            print(text, file=self.stream, flush=True)

    def result(self, text: str) -> None:
        """A result line (validation) on standard output, in every mode."""
        if self.bar is not None:
            self.bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    def warn(self, text: str) -> None:
        """A warning on standard error, in every mode (clearing the bar around it)."""
        if self.bar is not None:
            self.bar.write(f"warning: {text}", file=sys.stderr)
        else:
            print(f"warning: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


__all__ = ["Progress"]
