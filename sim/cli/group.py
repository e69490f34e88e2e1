"""The command group of ``rdmasim``: a usage error (an unknown option, a bad value, a missing argument) is one line,
``rdmasim run: --seed: reason``, with exit code 2, as every input rdmasim refuses is."""

from __future__ import annotations

import importlib
from contextlib import contextmanager

import typer
from typer.core import TyperGroup

# Typer 0.2x parses with its own copy of click: its usage errors are that copy's classes, beside BadParameter.
_errors = importlib.import_module(typer.BadParameter.__module__)


class OneLineUsageError(_errors.UsageError):
    """A usage error shown as one line naming the command, the option and the reason."""

    def __init__(self, cause: _errors.UsageError):
        super().__init__(cause.format_message(), cause.ctx)
        self.cause = cause

    def format_message(self) -> str:
        cause = self.cause
        if isinstance(cause, _errors.BadParameter) and not isinstance(cause, _errors.MissingParameter) and cause.param:
            param = cause.param
            name = param.opts[0] if param.param_type_name == "option" else param.human_readable_name
            return f"{name}: {cause.message.removeprefix('Value error, ')}"  # typer checks choices with pydantic
        return cause.format_message()

    def show(self, file=None) -> None:
        where = f"{self.ctx.command_path}: " if self.ctx is not None else ""
        typer.echo(where + self.format_message(), file=file, err=file is None)


@contextmanager
def _one_line():
    try:
        yield
    except (OneLineUsageError, getattr(_errors, "NoArgsIsHelpError", OneLineUsageError)):
        raise  # no arguments at all: the help, as it is
    except _errors.UsageError as exc:
        raise OneLineUsageError(exc) from None


class CommandGroup(TyperGroup):
    """The top-level group: a usage error raised while parsing its arguments or a command's becomes a
    :class:`OneLineUsageError`, which typer's standalone mode shows and exits with (code 2)."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            option.default = False  # typer coerces its None default with pydantic, costing every refused command line
        return option

    def make_context(self, info_name, args, parent=None, **extra):
        with _one_line():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx):
        with _one_line():
            return super().invoke(ctx)
