"""What the measurement scripts record about the machine they ran on."""

import subprocess


def command_output(cmd: list[str]) -> str:
    """The standard output of ``cmd`` (30 s at most), or what went wrong when it could not run: the record keeps
    either."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except Exception as exc:  # noqa: BLE001 - record what failed
        return repr(exc)
