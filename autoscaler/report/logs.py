"""structlog set-up: JSON lines when stderr is not a terminal, readable text when it is."""

from __future__ import annotations

import logging
import sys

import structlog

from autoscaler.settings import LogFormat, Settings


class _Stderr:
    """Writes to `sys.stderr` as it is at each write, not to the stream of the moment
    logging was configured: a caller that swaps stderr (a test's capture, a CLI run in
    process) must not leave the logger writing into a closed stream."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


PROG = "elastic-autoscaler"


def _for_people(_: object, method: str, event: structlog.typing.EventDict) -> str:
    """One short line: `elastic-autoscaler: warning: what (key=value, ...)`; no time, no
    traceback (the commands for people say what failed in their own error line)."""
    level = event.pop("level", method)
    what = event.pop("event", "")
    for noise in ("timestamp", "exception", "exc_info", "stack"):
        event.pop(noise, None)
    rest = ", ".join(f"{k}={v}" for k, v in event.items())
    return f"{PROG}: {level}: {what}" + (f" ({rest})" if rest else "")


def configure_logging(settings: Settings, *, for_people: bool = False) -> None:
    """The daemon's logs: JSON lines when stderr is not a terminal (`log_format`). With
    `for_people` (plan, status, explain: their stdout is the answer) only warnings and
    errors, each one short line on stderr, whatever `log_format` says."""
    level = getattr(logging, settings.log_level.upper())
    if for_people and level != logging.DEBUG:
        level = max(level, logging.WARNING)
    as_json = settings.log_format is LogFormat.JSON or (
        settings.log_format is LogFormat.AUTO and not sys.stderr.isatty()
    )
    renderer: structlog.typing.Processor = (
        _for_people
        if for_people
        else structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # structlog types `file` as TextIO but calls only write and flush, which is all
        # _Stderr has (a TextIO subclass would have to stub thirty methods)
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # libraries that log through the standard library end up in the same stream, in the
    # same format: one stream is one format (a JSON reader must not meet a plain line)
    handler = logging.StreamHandler(_Stderr())
    handler.set_name(_HANDLER)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.stdlib.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))


_HANDLER = "elastic-autoscaler"  # our handler on the root logger, replaced when configured again
