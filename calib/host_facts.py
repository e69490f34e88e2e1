"""What the measurement scripts record about the machine they ran on."""

import json
import platform
import subprocess
import time


def command_output(cmd: list[str]) -> str:
    """The standard output of ``cmd`` (30 s at most), or what went wrong when it could not run: the record keeps
    either."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except Exception as exc:  # noqa: BLE001 - record what failed
        return repr(exc)


def cuda_environment(cp) -> dict:
    """The GPU, CUDA runtime and driver versions (through CuPy ``cp``), Python, the kernel, the date and
    nvidia-smi's name, driver and memory columns."""
    rt = cp.cuda.runtime
    name = rt.getDeviceProperties(0)["name"]
    return {"gpu": name.decode() if isinstance(name, bytes) else name,
            "cuda_runtime": rt.runtimeGetVersion(), "cuda_driver": rt.driverGetVersion(),
            "cupy": cp.__version__, "python": platform.python_version(), "uname": platform.platform(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "smi": command_output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used",
                                   "--format=csv"])}


def run_and_save(measure, result: dict, path: str) -> None:
    """``measure(result)``, then ``result`` with its ``elapsed_s`` written as JSON to ``path``; what was measured
    before a failure is kept, the failure under ``errors``."""
    started = time.perf_counter()
    try:
        measure(result)
    except Exception as exc:  # noqa: BLE001 - keep what was measured
        result.setdefault("errors", []).append(repr(exc))
    finally:
        result["elapsed_s"] = time.perf_counter() - started
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
