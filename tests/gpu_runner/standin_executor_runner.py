"""A stand-in for ExecuTorch's native ``executor_runner``, for tests of the runner's native path.

It honours the real binary's command line as ``examples/portable/executor_runner/executor_runner.cpp``
(ExecuTorch main ``cff6f4dd32``, the build the H200 host ran) defines it: gflags ``--flag=value``
(``--model_path``, ``--inputs`` as comma-separated raw ``.bin`` files, ``--num_executions``,
``--output_file`` writing ``<base>-<i>.bin``, ``--server_mode`` with one execution per stdin line and
``SERVER MODE DONE``, ``--print_output``, ``--helpshort``), and logs through the same PAL line format
("I 00:00:00.000123 executorch:executor_runner.cpp:NNN] ..."), with the real binary's messages.

The programs really run: through the executorch pip wheel's runtime (portable kernels and XNNPACK), so
outputs are ExecuTorch's own, and a Vulkan program is refused as the wheel refuses it. Faults the tests
need are injected through the environment:

- ``STANDIN_REFUSE=<file>``: at load, print that file (a runtime's output recorded on a real host, from
  ``tests/gpu_runner/recorded/``) and abort, as a failed ``ET_CHECK`` or an uncaught exception does;
- ``STANDIN_CRASH_AFTER=N``: die of SIGSEGV at execution N+1 (counted over the process);
- ``STANDIN_HANG_AFTER=N``: stop answering at execution N+1;
- ``STANDIN_ALTER_EXECUTION=K``: add 1 to output 0 of execution K only (1-based, over the process);
- ``STANDIN_COUNT_FILE=<file>``: count executions over every process that shares the file instead (one
  process per call: the K-th execution of the whole run).

``write_standin(folder, event_tracer=True)`` stands in for a build with the event tracer on
(``EXECUTORCH_ENABLE_EVENT_TRACER=ON``): it has ``--etdump_path``, and with it loads the program through
the wheel's pybindings with ``enable_etdump`` and writes their real ETDump there at the end;
``intermediate_outputs=True`` adds the debug-buffer flags, with which it captures intermediate outputs
(``debug_buffer_size``) and writes the debug buffer beside the ETDump.

It is run through a wrapper script that ``write_standin`` creates; that wrapper also carries the
registration names of the backends the wheel has, as a real binary's data section does, so the
runner's backend scan finds them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

_START = time.monotonic()
_REGISTERED = ("XnnpackBackend",)
# ExecuTorch's ScalarType codes -> numpy dtype names
_SCALAR = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
           7: "float64", 11: "bool"}  # fmt: skip
_FLAGS = {
    "model_path": ("Model serialized in flatbuffer format.", "string", '"model.pte"'),
    "data_path": ("Path to data file (.ptd).", "string", '""'),
    "inputs": ("Comma-separated list of input files", "string", '""'),
    "output_file": ("Base name of output file.", "string", '""'),
    "server_mode": ("Run continuously, executing one inference per line read from stdin.", "bool", "false"),
    "print_output": ("Output printing mode.", "string", '"summary"'),
    "num_executions": ("Number of times to run the model.", "uint32", "1"),
    "method_name": ("Name of the method to run.", "string", '""'),
    "cpu_threads": ("Number of CPU threads for inference.", "int32", "-1"),
}


def log(level: str, line: int, message: str) -> None:
    elapsed = time.monotonic() - _START
    hours, rest = divmod(elapsed, 3600)
    minutes, seconds = divmod(rest, 60)
    stamp = f"{int(hours):02d}:{int(minutes):02d}:{seconds:09.6f}"
    print(f"{level} {stamp} executorch:executor_runner.cpp:{line}] {message}", file=sys.stderr, flush=True)


def fatal(message: str) -> None:
    log("F", 590, f"In function main(), assert failed: {message}")
    os.abort()


def parse(argv: list[str]) -> dict[str, str]:
    flags = {name: default.strip('"') for name, (_, _, default) in _FLAGS.items()}
    for arg in argv:
        if arg in ("--helpshort", "-helpshort"):
            for name, (text, kind, default) in _FLAGS.items():
                print(f"    -{name} ({text}) type: {kind} default: {default}")
            sys.exit(1)  # gflags exits with 1 after printing help
        name, _, value = arg.lstrip("-").partition("=")
        if name not in _FLAGS:
            print(f"ERROR: unknown command line flag '{name}'", file=sys.stderr)
            sys.exit(1)
        flags[name] = value if value or _FLAGS[name][1] != "bool" else "true"
    return flags


_ETDUMP_FLAG = ("Path to the ETDump (event tracer builds only).", "string", '""')
# The intermediate-output flags (as ExecuTorch's devtools example_runner defines them).
_DEBUG_FLAGS = {
    "dump_intermediate_outputs": ("Dump intermediate outputs to etdump file.", "bool", "false"),
    "debug_buffer_size": ("Size of the debug buffer in bytes.", "int32", "262144"),
    "debug_output_path": ("Path to dump debug outputs to.", "string", '"debug_output.bin"'),
}


def main() -> None:
    if os.environ.get("STANDIN_EVENT_TRACER") in ("1", "intermediate"):
        _FLAGS["etdump_path"] = _ETDUMP_FLAG
    if os.environ.get("STANDIN_EVENT_TRACER") == "intermediate":
        _FLAGS.update(_DEBUG_FLAGS)
    flags = parse(sys.argv[1:])
    if flags.get("etdump_path"):
        traced(flags)
        return
    refuse = os.environ.get("STANDIN_REFUSE")
    import numpy as np

    log("I", 318, "Resetting threadpool with num threads = 2")
    model = Path(flags["model_path"])
    if not model.is_file():
        log("E", 431, f"Could not open {model}")
        fatal("(loader.ok()) FileDataLoader::from() failed: 0x22")
    log("I", 470, f"Model file {model} is loaded.")
    log("I", 479, "Using method forward")
    from executorch.runtime import Runtime  # imported before timing: a binary has it linked in

    start = time.perf_counter()
    if refuse:
        sys.stderr.write(Path(refuse).read_text())
        sys.stderr.flush()
        os.abort()

    try:
        method = Runtime.get().load_program(model).load_method("forward")
    except Exception:
        fatal("(method.ok()) Loading of method forward failed with status 0x14")
    log("I", 600, f"Model loaded in {(time.perf_counter() - start) * 1e3:f} ms.")
    meta = method.metadata
    shapes = [meta.input_tensor_meta(i) for i in range(meta.num_inputs())]
    paths = [Path(p) for p in flags["inputs"].split(",")] if flags["inputs"] else []
    executions = [0]

    def run_once() -> list[object]:
        import torch

        arrays = []
        for path, tensor in zip(paths, shapes, strict=True):
            dtype = np.dtype(_SCALAR[tensor.dtype()]).newbyteorder("<")
            array = np.frombuffer(path.read_bytes(), dtype=dtype)
            arrays.append(torch.from_numpy(array.reshape(tensor.sizes()).copy()))
        executions[0] += 1
        if shared := os.environ.get("STANDIN_COUNT_FILE"):
            counter = Path(shared)
            executions[0] = int(counter.read_text() or 0) + 1 if counter.is_file() else 1
            counter.write_text(str(executions[0]))
        crash, hang = os.environ.get("STANDIN_CRASH_AFTER"), os.environ.get("STANDIN_HANG_AFTER")
        if crash is not None and executions[0] > int(crash):
            os.kill(os.getpid(), signal.SIGSEGV)
        if hang is not None and executions[0] > int(hang):
            time.sleep(3600)
        outputs = [o.numpy().copy() for o in method.execute(arrays)]
        if os.environ.get("STANDIN_ALTER_EXECUTION") == str(executions[0]):
            outputs[0] = outputs[0] + 1
        return outputs

    def write(outputs: list[object]) -> None:
        for i, array in enumerate(outputs):
            name = f"{flags['output_file']}-{i}.bin"
            log("I", 787, f"Writing output to file: {name}")
            Path(name).write_bytes(np.ascontiguousarray(array).tobytes())

    if flags["server_mode"] == "true":
        if not flags["output_file"]:
            fatal("--output_file must be set in --server_mode so outputs can be retrieved.")
        log("I", 634, "Running in server mode; waiting for stdin triggers.")
        log("I", 636, f"{meta.num_outputs()} outputs: ")
        for _ in sys.stdin:
            write(run_once())
            log("I", 712, "SERVER MODE DONE")
        return
    total = 0.0
    outputs: list[object] = []
    count = int(flags["num_executions"])
    for i in range(count):
        begin = time.perf_counter()
        outputs = run_once()
        spent = (time.perf_counter() - begin) * 1e3
        total += spent
        log("I", 760, f"Iteration {i + 1} of {count}: {spent:f} ms")
    log("I", 770, f"Model executed successfully {count} time(s) in {total:f} ms.")
    if flags["output_file"] and outputs:
        write(outputs)


def traced(flags: dict[str, str]) -> None:
    """``--etdump_path``: the executions through the wheel's pybindings with their ETDump on."""
    import numpy as np
    import torch
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    debug = flags.get("dump_intermediate_outputs") == "true"
    size = int(flags["debug_buffer_size"]) if debug else 0
    module = _load_for_executorch(flags["model_path"], enable_etdump=True, debug_buffer_size=size)
    meta = module.method_meta("forward")
    paths = [Path(p) for p in flags["inputs"].split(",")] if flags["inputs"] else []
    arrays = []
    for i, path in enumerate(paths):
        tensor = meta.input_tensor_meta(i)
        dtype = np.dtype(_SCALAR[tensor.dtype()]).newbyteorder("<")
        array = np.frombuffer(path.read_bytes(), dtype=dtype).reshape(tensor.sizes()).copy()
        arrays.append(torch.from_numpy(array))
    count = int(flags["num_executions"])
    for i in range(count):
        begin = time.perf_counter()
        module.run_method("forward", tuple(arrays))
        log("I", 760, f"Iteration {i + 1} of {count}: {(time.perf_counter() - begin) * 1e3:f} ms")
    module.write_etdump_result_to_file(flags["etdump_path"], flags["debug_output_path"] if debug else None)
    log("I", 805, f"ETDump written to file '{flags['etdump_path']}'.")


def write_standin(folder: Path, event_tracer: bool = False, intermediate_outputs: bool = False) -> Path:
    """An executable ``executor_runner`` in ``folder`` that runs this stand-in with this Python; with
    ``event_tracer`` one built with the event tracer on (``--etdump_path``); with
    ``intermediate_outputs`` also the debug-buffer flags of ExecuTorch's devtools ``example_runner``
    (``--dump_intermediate_outputs``, ``--debug_buffer_size``, ``--debug_output_path``)."""
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "executor_runner"
    mode = "intermediate" if intermediate_outputs else "1"
    traced = f"export STANDIN_EVENT_TRACER={mode}\n" if event_tracer or intermediate_outputs else ""
    script = f'#!/bin/sh\n{traced}exec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n'
    names = b"".join(b"\0" + name.encode() + b"\0" for name in _REGISTERED)
    wrapper.write_bytes(script.encode() + names)  # sh never reads past exec
    wrapper.chmod(0o755)
    return wrapper


if __name__ == "__main__":
    main()
