"""Shared test setup.

At import, before anything imports workbench, the build cache is pointed at a per-session
temporary directory (or at $WORKBENCH_TEST_CACHE, so that CI can keep builds between runs) and
progress lines are silenced. Every subprocess a test starts inherits the same cache, so the
harness (~8 s) is built once per session and child processes load it warm.

The harness registers torch.ops.workbench with TORCH_LIBRARY, which may happen only once per
process: anything that needs a different harness (another kernel tree, another toolchain) must run
in a subprocess (`run_python` / `spawn_python`).
"""
from __future__ import annotations

import atexit
import os
import pathlib
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

_test_cache = os.environ.get("WORKBENCH_TEST_CACHE")
if _test_cache:
    CACHE_DIR = pathlib.Path(_test_cache).expanduser().resolve()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
else:
    CACHE_DIR = pathlib.Path(tempfile.mkdtemp(prefix="workbench-test-cache-"))
    atexit.register(shutil.rmtree, CACHE_DIR, True)
os.environ["WORKBENCH_CACHE"] = str(CACHE_DIR)
os.environ["WORKBENCH_QUIET"] = "1"

import torch  # noqa: E402  (after the environment above, on purpose)

HAS_GPU = torch.cuda.is_available()


def pytest_configure(config):
    # Also declared in pyproject.toml; repeated so the suite works from a checkout without it.
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped where none is visible)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def pytest_addoption(parser):
    parser.addoption("--chunk", default=None, metavar="K/N",
                     help="run only chunk K of N of the selected tests (every N-th test from the K-th, so each "
                          "chunk gets a share of every file): the GPU suite no longer fits one 10-minute call")


def chunk_of(items: list, chunk: str) -> list:
    """The items of chunk "K/N" (K in 1..N): items[K-1::N]."""
    try:
        k, n = (int(v) for v in chunk.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--chunk must be K/N with integers, like 2/4; got {chunk!r}") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--chunk K/N needs 1 <= K <= N; got {chunk!r}")
    return items[k - 1::n]


@pytest.hookimpl(trylast=True)  # after -m / -k have deselected, so chunks split what would run
def pytest_collection_modifyitems(config, items):
    chunk = config.getoption("--chunk")
    if not chunk:
        return
    keep = chunk_of(items, chunk)
    kept = {id(i) for i in keep}
    config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
    total = len(items)
    items[:] = keep
    reporter = config.pluginmanager.get_plugin("terminalreporter")  # none in an xdist worker
    if reporter is not None:
        reporter.write_line(f"chunk {chunk}: {len(keep)} of the {total} selected tests")


def pytest_report_header(config):
    return f"workbench test cache: {CACHE_DIR} (torch {torch.__version__}, GPU visible: {HAS_GPU})"


@pytest.fixture(autouse=True)
def _skip_gpu_tests_without_gpu(request):
    if request.node.get_closest_marker("gpu") is not None and not HAS_GPU:
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False")


def _child_env(env_extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["WORKBENCH_CACHE"] = str(CACHE_DIR)
    env["WORKBENCH_QUIET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTEST_CURRENT_TEST", None)
    for k, v in (env_extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_python(code: str, env_extra: dict | None = None, timeout: float = 240,
               args: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (same executable, same cache, cwd = repo root).
    `env_extra` adds or (with None) removes environment variables. Output is captured as text."""
    return subprocess.run([sys.executable, "-c", code, *(args or [])], cwd=REPO_ROOT, env=_child_env(env_extra),
                          capture_output=True, text=True, timeout=timeout)


def run_cli(*argv: str, env_extra: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """`python -m workbench ARGV...` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "workbench", *argv], cwd=REPO_ROOT, env=_child_env(env_extra),
                          capture_output=True, text=True, timeout=timeout)


def describe(proc: subprocess.CompletedProcess) -> str:
    """A failure message with everything a child printed."""
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


@pytest.fixture(name="run_python")
def _run_python_fixture():
    return run_python


@pytest.fixture(name="run_cli")
def _run_cli_fixture():
    return run_cli


@pytest.fixture
def spawn_python():
    """Start `code` in a background interpreter (stdin/stdout pipes, text mode); every process
    started through it is killed and reaped when the test ends."""
    procs: list[subprocess.Popen] = []

    def spawn(code: str, env_extra: dict | None = None) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, env=_child_env(env_extra),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pass


def wait_for_line(proc: subprocess.Popen, expected: str, timeout: float = 120) -> str:
    """Read the child's stdout until a line starting with `expected` (or fail with its stderr)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            break
        line = proc.stdout.readline()
        if not line:  # EOF: the child exited
            break
        seen.append(line)
        if line.startswith(expected):
            return line.strip()
    proc.kill()
    _, err = proc.communicate(timeout=30)
    raise AssertionError(f"child never printed {expected!r}; stdout: {''.join(seen)!r}\nstderr:\n{err}")


@pytest.fixture(scope="session")
def wb():
    import workbench

    return workbench


@pytest.fixture(scope="session")
def cpu_kernel(wb):
    return wb.load("bias_gelu", "cpu")


@pytest.fixture(scope="session")
def cuda_buildable():
    """Skip unless CUDA variants can be compiled and linked here (CUDA torch + nvcc)."""
    from workbench.build import toolchain

    if not toolchain.can_build_cuda():
        reason = "torch has no CUDA" if not toolchain.torch_has_cuda() else "no nvcc found (CUDA_HOME / PATH)"
        pytest.skip(f"cannot build CUDA variants here: {reason}")
    return True


@pytest.fixture(scope="session")
def scalar_kernel(wb, cuda_buildable):
    """The CUDA `scalar` variant, built and linked (it loads without a GPU; it cannot run)."""
    return wb.load("bias_gelu", "scalar")


@pytest.fixture(scope="session")
def cpu_source_text() -> str:
    return (REPO_ROOT / "kernels" / "bias_gelu" / "cpu.cpp").read_text()


def private_cache(dest: pathlib.Path, labels=("harness", "binding-bias_gelu", "bias_gelu-cpu")) -> pathlib.Path:
    """A separate cache directory seeded with copies of the session cache's published builds whose
    directory names start with one of `labels` (the harness, bias_gelu's binding and its cpu variant by default), so a
    test can delete or corrupt its cache without costing other tests a rebuild. Content keys do
    not depend on where the cache lives, so the copies are warm hits."""
    import workbench  # noqa: F401  (builds the harness and cpu first, if needed)
    from workbench.build import cache
    from workbench.run import loader

    loader.ensure_harness()
    workbench.load("bias_gelu", "cpu")
    (dest / "builds").mkdir(parents=True, exist_ok=True)
    # Only the builds this process loaded (it holds them in use): the session cache may be shared by
    # several test workers and hold other builds of the same labels (another harness flavour).
    loaded = {pathlib.Path(d).name for d in cache._in_use_fds}
    for d in cache.builds_root().iterdir():
        # The label exactly ("bias_gelu-cpu", not "bias_gelu-cpu_wrong_after_warmup" that another test
        # file loaded in this worker), then the key's 20 hex digits.
        label, _, key = d.name.rpartition("-")
        if d.is_dir() and d.name in loaded and label in labels and len(key) == 20:
            shutil.copytree(d, dest / "builds" / d.name, ignore=shutil.ignore_patterns("inuse"))
    if (CACHE_DIR / "toolchain").exists():
        shutil.copytree(CACHE_DIR / "toolchain", dest / "toolchain")
    return dest
