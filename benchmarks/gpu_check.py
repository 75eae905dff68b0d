"""Every chapter on a GPU machine, at two seeds, and the package's sliding-window attention against FlexAttention.

    python benchmarks/gpu_check.py                 # the 11 chapters at the stored seed and at 101; attention on CUDA
    python benchmarks/gpu_check.py --jobs 4 chapters/dl0035_transformer_architecture.ipynb
    python benchmarks/gpu_check.py --seeds stored --no-attention --out-dir /tmp/gpu_check
    python benchmarks/gpu_check.py --stand-in-accelerator --no-attention --jobs 1   # on a CPU (see below)

Each chapter runs top to bottom in a fresh kernel (cwd = its folder, as the book build and nbval
do), once at the stored seed (``COURSE_SEED`` unset, base seed 0) and once at ``--other-seed``
(101), ``--jobs`` notebooks at a time. A first cell inserted into the in-memory notebook sets (or
removes) ``COURSE_SEED`` before the chapter's own ``course_seed()`` reads it; a last cell, run only
when the chapter held, prints which device the chapter used and how
``transformer_course.experiments.parallel`` starts its worker processes there. A run *holds* when
every cell ran without an error; a failing claim is an ``AssertionError`` naming the claim.

Why: on a GPU runtime, chapters crashed because ``parallel`` forked workers after the chapter
process had initialized CUDA or run a backward pass. ``--stand-in-accelerator`` reproduces the
autograd half of that defect on a CPU: the inserted cell registers PyTorch's dummy PrivateUse1
device (``torch.utils.backend_registration._setup_privateuseone_for_python_backend``, one device),
so autograd starts a device thread at the first backward pass and a child forked after it fails
with "Unable to handle autograd's threading in combination with fork-based multiprocessing". It
does not reproduce CUDA's own "CUDA error: initialization error" in a forked child; only a GPU does.

With CUDA (unless ``--no-attention``), ``sliding_window_attention`` (window 512, so
|i - j| <= 256) with implementation "auto", "fused" and "blocked" is timed against compiled
FlexAttention with a ``create_block_mask`` band, bfloat16, head width 64, at (B, H, T) =
(1, 8, 16384), (1, 8, 65536), (8, 16, 4096): the median of 20 calls (CUDA events) after warm-up,
and the peak memory of one call above what was allocated before it. An implementation that fails
(FlexAttention on an older card, say) is an error row, not a crash.

Writes ``gpu_check.csv`` (one row per chapter and seed), ``gpu_check_attention.csv`` (when the
attention ran), ``gpu_check.json`` (the machine) and ``gpu_check.md`` (the tables) to ``--out-dir``
(default benchmarks/results). Exit status 1 if any chapter run failed (attention errors are
reported, not counted).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

import nbformat
import pandas as pd
import torch
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from transformer_course.nn.sparse_attention import sliding_window_attention

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("dl00*.ipynb"))
RESULTS = ROOT / "benchmarks" / "results"
DEVICE_MARKER = "GPU_CHECK"  # the line the last inserted cell prints, followed by JSON
STORED_SEED = "stored"  # the seed label of a run with COURSE_SEED unset (base seed 0)
UNKNOWN = "unknown"  # the device of a run that failed before the last cell


def _load_benchmarks_run():
    """benchmarks/run.py as a module (benchmarks/ is not a package): its attention implementations and timers."""
    if "benchmarks_run" not in sys.modules:
        spec = importlib.util.spec_from_file_location("benchmarks_run", Path(__file__).with_name("run.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["benchmarks_run"] = module  # run.py's dataclass looks its module up while being defined
        spec.loader.exec_module(module)
    return sys.modules["benchmarks_run"]


benchmarks_run = _load_benchmarks_run()

FLEX = "compiled FlexAttention"  # benchmarks/run.py's name for it
PACKAGE_IMPLEMENTATIONS = ("auto", "fused", "blocked")  # sliding_window_attention(implementation=...)
ATTENTION_SHAPES = ((1, 8, 16_384), (1, 8, 65_536), (8, 16, 4096))  # (B, H, T)
ATTENTION_WINDOW = 512  # keys |i - j| <= 256 (band_limits: w // 2 each side)
ATTENTION_CALLS = 20


def setup_cell_source(seed: int | None, stand_in_accelerator: bool) -> str:
    """The cell put before a chapter's first: its base seed (None: the stored one) and the stand-in device."""
    lines = ["import os"]
    lines.append(f'os.environ["COURSE_SEED"] = "{seed}"' if seed is not None else 'os.environ.pop("COURSE_SEED", None)')
    if stand_in_accelerator:
        lines += ["from torch.utils.backend_registration import _setup_privateuseone_for_python_backend",
                  "_setup_privateuseone_for_python_backend()  # PyTorch's dummy PrivateUse1 device: autograd threads"]
    return "\n".join(lines)


DEVICE_PROBE_SOURCE = f"""\
import json as _json
import torch as _torch
from transformer_course.experiments import parallel as _parallel
_device = globals().get("device")  # what the chapter's setup_notebook() returned
if not isinstance(_device, _torch.device):
    _device = _torch.device("cuda" if _torch.cuda.is_available() else "cpu")
_name = _torch.cuda.get_device_name(_device) if _device.type == "cuda" else ""
print("{DEVICE_MARKER} " + _json.dumps({{"device": f"{{_device.type}}:{{_name}}" if _name else _device.type,
                                         "worker_start": _parallel.start_method(), "torch": _torch.__version__}}))
"""


def probed_device(notebook) -> dict:
    """The device line printed by the last cell of an executed notebook ({} if it printed none)."""
    for output in notebook.cells[-1].get("outputs", []):
        for line in output.get("text", "").splitlines():
            if line.startswith(DEVICE_MARKER + " "):
                return json.loads(line[len(DEVICE_MARKER) + 1:])
    return {}


def first_line(text: str) -> str:
    """The first non-empty line of ``text`` ('' if none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def run_chapter(path: Path, seed: int | None, stand_in_accelerator: bool = False) -> dict:
    """Execute one notebook at base seed ``seed`` (None: the stored seed); whether it held, and where it failed.

    ``failing_cell`` is the index of the failing cell in the notebook's file, as text ("setup" or
    "device probe" for the inserted first and last cells); ``device``, ``worker_start`` and ``torch``
    come from the last cell, so when the chapter failed the device is "unknown" and ``torch`` is
    this process's.
    """
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(setup_cell_source(seed, stand_in_accelerator)))
    notebook.cells.append(nbformat.v4.new_code_cell(DEVICE_PROBE_SOURCE))
    started: list[int] = []  # the index of each cell as it starts; the last one is running
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_start=lambda cell, cell_index: started.append(cell_index))
    error_type = error_message = failing_cell = None
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as error:
        error_type, error_message = error.ename, first_line(error.evalue)
    except Exception as error:  # the kernel died or a cell ran past the timeout
        error_type, error_message = type(error).__name__, first_line(str(error))
    seconds = time.perf_counter() - start
    if error_type is not None and started:
        last = started[-1]
        failing_cell = "setup" if last == 0 else "device probe" if last == len(notebook.cells) - 1 else str(last - 1)
    probe = probed_device(notebook) if error_type is None else {}
    return {"chapter": path.stem, "seed": STORED_SEED if seed is None else str(seed), "held": error_type is None,
            "seconds": round(seconds, 1), "error_type": error_type, "error_message": error_message,
            "failing_cell": failing_cell, "device": probe.get("device", UNKNOWN),
            "worker_start": probe.get("worker_start", UNKNOWN), "torch": probe.get("torch", torch.__version__)}


def run_chapters(paths: list[Path], seeds: list[int | None], jobs: int, stand_in_accelerator: bool) -> pd.DataFrame:
    """:func:`run_chapter` for every path and seed, ``jobs`` at a time; rows in the order of (path, seed)."""
    runs = [(path, seed) for path in paths for seed in seeds]
    rows: dict[int, dict] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each NotebookClient runs its own kernel process
        futures = {pool.submit(run_chapter, path, seed, stand_in_accelerator): index
                   for index, (path, seed) in enumerate(runs)}
        for future in as_completed(futures):
            row = rows[futures[future]] = future.result()
            outcome = ("held" if row["held"] else
                       f"FAILED at cell {row['failing_cell']}: {row['error_type']}: {row['error_message']}")
            print(f"[{len(rows)}/{len(runs)}] {row['chapter']} seed {row['seed']}: {outcome} ({row['seconds']:.1f} s)",
                  flush=True)
    return pd.DataFrame([rows[index] for index in range(len(runs))])


def _peak_extra_mb(call: Callable[[], object], device: torch.device) -> float:
    """Peak CUDA memory of one ``call()`` above what was allocated before it, in MiB."""
    benchmarks_run.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    call()
    benchmarks_run.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def _attention_implementation(name: str, case, device: torch.device) -> Callable[..., torch.Tensor]:
    """Compiled FlexAttention with the case's block mask (from benchmarks/run.py), or the package's path ``name``."""
    if name == FLEX:
        return benchmarks_run.attention_impls(case, device, [FLEX])[FLEX]
    return lambda q, k, v: sliding_window_attention(q, k, v, case.window, implementation=name)


def attention_rows(device: torch.device, shapes=ATTENTION_SHAPES, implementations=PACKAGE_IMPLEMENTATIONS,
                   reference: str = FLEX, calls: int = ATTENTION_CALLS, seed: int = 0) -> pd.DataFrame:
    """Median milliseconds and peak memory of ``reference`` and each implementation at each (B, H, T), bfloat16.

    ``reference`` (compiled FlexAttention; a test passes a package path to skip its compile) runs
    first at each shape: every implementation's time and memory are divided by its
    (``time_vs_flex``, ``memory_vs_flex``) and its output compared with it (``max_abs_error``). An
    implementation that raises gets a row with its ``error`` and nothing measured. Peak memory is
    measured on CUDA only (NaN elsewhere).
    """
    rows = []
    generator = torch.Generator().manual_seed(seed)
    for batch, heads, n in shapes:
        case = benchmarks_run.Case("sliding_window", n, heads, "bfloat16", window=ATTENTION_WINDOW)
        q, k, v = (torch.randn(batch, heads, n, benchmarks_run.D_HEAD, generator=generator)
                   .to(device, torch.bfloat16) for _ in range(3))  # (B, H, T, Dh)
        expected = None  # the reference's output
        for name in (reference, *implementations):
            row = {"batch": batch, "heads": heads, "n": n, "implementation": name, "median_ms": float("nan"),
                   "peak_mb": float("nan"), "max_abs_error": float("nan"), "error": None}
            try:
                with torch.no_grad():
                    attend = _attention_implementation(name, case, device)
                    out = attend(q, k, v)  # (B, H, T, Dh); the first call compiles FlexAttention
                    benchmarks_run.synchronize(device)
                    if name == reference:
                        expected = out
                    if expected is not None:
                        row["max_abs_error"] = float((out.float() - expected.float()).abs().max())
                    del out
                    row["median_ms"] = 1000 * benchmarks_run.median_seconds(lambda: attend(q, k, v), calls, device,
                                                                            warmup=3)
                    if device.type == "cuda":
                        row["peak_mb"] = _peak_extra_mb(lambda: attend(q, k, v), device)
            except Exception as error:  # e.g. FlexAttention unsupported on this card
                row["error"] = f"{type(error).__name__}: {first_line(str(error))}"
            rows.append(row)
        del q, k, v, expected
        if device.type == "cuda":
            torch.cuda.empty_cache()
    frame = pd.DataFrame(rows)
    shape = ["batch", "heads", "n"]
    of_reference = (frame[frame.implementation == reference].set_index(shape)
                    .reindex(pd.MultiIndex.from_frame(frame[shape])))  # each row's shape's reference row
    frame["time_vs_flex"] = frame.median_ms.to_numpy() / of_reference.median_ms.to_numpy()
    frame["memory_vs_flex"] = frame.peak_mb.to_numpy() / of_reference.peak_mb.to_numpy()
    return frame


def machine_info(stand_in_accelerator: bool, jobs: int) -> dict:
    """The machine of this run: device, versions, cores, date (UTC), and how the chapters ran."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return {"device": benchmarks_run.device_name(device), "torch": torch.__version__,
            "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "stand_in_accelerator": stand_in_accelerator, "jobs": jobs}


def _cell_text(value) -> str:
    """A value as markdown table text: '' for a missing one, pipes escaped."""
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value).replace("|", "\\|")


def summary_line(chapters: pd.DataFrame) -> str:
    """How many chapter runs held, which failed, and the chapters' total seconds."""
    failed = chapters[~chapters.held]
    names = ", ".join(f"{r.chapter} (seed {r.seed})" for r in failed.itertuples()) or "none"
    return (f"Chapters held: {int(chapters.held.sum())} of {len(chapters)} runs; failed: {names}; "
            f"{chapters.seconds.sum():.1f} s of chapter time.")


def write_markdown(chapters: pd.DataFrame, attention: pd.DataFrame | None, machine: dict, path: Path) -> None:
    """The machine, the chapters' table and its summary, and (if it ran) the attention table, as a markdown fragment."""
    where = f"{machine['device']}, {machine['date']}"
    stand_in = (" Each kernel registered PyTorch's stand-in accelerator (the dummy PrivateUse1 device), which "
                "reproduces autograd's fork defect on a CPU." if machine["stand_in_accelerator"] else "")
    parts = [f"**Machine:** {machine['device']}; {machine['cpu_count']} CPU cores; torch {machine['torch']}; "
             f"Python {machine['python']}; run on {machine['date']}.{stand_in}"]
    seeds = " and ".join("the stored seed" if seed == STORED_SEED else f"COURSE_SEED = {seed}"
                         for seed in dict.fromkeys(chapters.seed))
    rows = [[r.chapter, r.seed, "yes" if r.held else "**no**", benchmarks_run._fixed(r.seconds, 1),
             _cell_text(r.failing_cell), _cell_text(f"{r.error_type}: {r.error_message}" if r.error_type else None),
             _cell_text(r.device)] for r in chapters.itertuples()]
    header = ["chapter", "seed", "held", "seconds", "failing cell", "error", "device"]
    table = benchmarks_run._markdown_table(header, rows)
    parts += ["", benchmarks_run._captioned(
        f"Each chapter executed top to bottom in a fresh kernel at {seeds}, {machine['jobs']} at a time "
        f"(seconds include the kernel's start); {where}", table), "", summary_line(chapters)]
    if attention is not None:
        rows = [[f"{r.batch}, {r.heads}, {r.n:,}", r.implementation, benchmarks_run._fixed(r.median_ms, 2),
                 benchmarks_run._fixed(r.peak_mb, 1), benchmarks_run._fixed(r.time_vs_flex, 2, "×"),
                 benchmarks_run._fixed(r.memory_vs_flex, 2, "×"), _cell_text(r.error)] for r in attention.itertuples()]
        table = benchmarks_run._markdown_table(
            ["B, H, T", "implementation", "ms", "peak MiB", "time vs Flex", "memory vs Flex", "error"], rows)
        parts += ["", benchmarks_run._captioned(
            f"Sliding-window attention (w = {ATTENTION_WINDOW}: |i - j| <= {ATTENTION_WINDOW // 2}), bfloat16, head "
            f"width {benchmarks_run.D_HEAD}: the median of {ATTENTION_CALLS} calls after warm-up and the peak memory "
            f"of one call above what was allocated before it; *vs Flex* divides by compiled FlexAttention's; {where}",
            table)]
    path.write_text("\n".join(parts) + "\n")


def default_jobs() -> int:
    """Notebooks at a time: half the cores (each kernel computes on several threads), 1 to 8."""
    return max(1, min(8, (os.cpu_count() or 1) // 2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="chapter notebooks (default: the 11 chapters/dl00*.ipynb)")
    parser.add_argument("--seeds", choices=("both", "stored"), default="both",
                        help="run at the stored seed and at --other-seed (both), or at the stored seed only")
    parser.add_argument("--other-seed", type=int, default=101, help="the second base seed, COURSE_SEED (default 101)")
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help=f"notebooks executed at once (default here: {default_jobs()})")
    parser.add_argument("--stand-in-accelerator", action="store_true",
                        help="register PyTorch's dummy PrivateUse1 device in each kernel (the fork defect on a CPU)")
    parser.add_argument("--no-attention", action="store_true", help="skip the attention benchmark (run on CUDA only)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS,
                        help="where the results go (default benchmarks/results)")
    args = parser.parse_args(argv)
    for path in args.paths:
        if not path.is_file():
            parser.error(f"no such notebook: {path}")
        if path.suffix != ".ipynb":
            parser.error(f"not a notebook (.ipynb): {path}")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.other_seed < 1:
        parser.error(f"--other-seed must be >= 1 (0 is the stored seed), got {args.other_seed}")
    paths = [path.resolve() for path in args.paths] or CHAPTERS
    seeds = [None] if args.seeds == "stored" else [None, args.other_seed]

    machine = machine_info(args.stand_in_accelerator, args.jobs)
    start = time.perf_counter()
    chapters = run_chapters(paths, seeds, args.jobs, args.stand_in_accelerator)
    wall = time.perf_counter() - start
    attention = None
    if torch.cuda.is_available() and not args.no_attention:
        attention = attention_rows(torch.device("cuda"))
    machine["attention"] = attention is not None

    args.out_dir.mkdir(parents=True, exist_ok=True)
    chapters.to_csv(args.out_dir / "gpu_check.csv", index=False)
    if attention is not None:
        attention.to_csv(args.out_dir / "gpu_check_attention.csv", index=False, float_format="%.4g")
    (args.out_dir / "gpu_check.json").write_text(json.dumps(machine, indent=2) + "\n")
    write_markdown(chapters, attention, machine, args.out_dir / "gpu_check.md")

    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 80):
        print("\n" + chapters.to_string(index=False))
        if attention is not None:
            print("\n" + attention.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"\n{summary_line(chapters)} Wall time {wall:.1f} s with {args.jobs} at a time.")
    if attention is not None:
        print(f"Attention: {attention.error.notna().sum()} of {len(attention)} rows failed.")
    elif not args.no_attention:
        print("Attention: skipped (no CUDA device).")
    print(f"written: {args.out_dir / 'gpu_check.csv'} (and .json, .md)")
    return 0 if chapters.held.all() else 1


if __name__ == "__main__":
    sys.exit(main())
