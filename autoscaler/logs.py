"""structlog set-up: JSON lines when stderr is not a terminal, readable text when it is."""

from __future__ import annotations

import logging
import sys

import structlog

from .settings import LogFormat, Settings


class _Stderr:
    """Writes to `sys.stderr` as it is at each write, not to the stream of the moment
    logging was configured: a caller that swaps stderr (a test's capture, a CLI run in
    process) must not leave the logger writing into a closed stream."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(settings: Settings) -> None:
    level = getattr(logging, settings.log_level.upper())
    as_json = settings.log_format is LogFormat.JSON or (
        settings.log_format is LogFormat.AUTO and not sys.stderr.isatty()
    )
    renderer = (
        structlog.processors.JSONRenderer()
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
    # libraries that log through the standard library end up in the same stream
    logging.basicConfig(
        level=max(level, logging.WARNING),
        stream=_Stderr(),
        format="%(levelname)s %(name)s %(message)s",
    )
