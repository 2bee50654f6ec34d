"""A native, torch-free ExecuTorch ``executor_runner`` binary as the runtime that executes a bundle.

The host's owner builds it from ExecuTorch (``examples/portable/executor_runner``, with
``EXECUTORCH_BUILD_VULKAN=ON`` for Vulkan, event tracer off) and gives its path with
``--executor-runner PATH`` or ``COVERFARM_EXECUTOR_RUNNER``, and the source it was built from with
``COVERFARM_EXECUTOR_RUNNER_VERSION``, ``COVERFARM_EXECUTOR_RUNNER_COMMIT`` and, for a candidate fix,
``COVERFARM_EXECUTOR_RUNNER_PATCHES`` (``gpu_runner.declared_source``). coverfarm never builds it.

What the binary offers, and so what this package relies on (ExecuTorch's ``executor_runner.cpp``):
``--model_path``; ``--inputs a.bin,b.bin`` (raw bytes, one file per method input in order, each
checked against the tensor's byte size); ``--num_executions N``; ``--output_file X``, which writes each
tensor output ``i`` as raw bytes to ``X-<i>.bin``; ``--bundleio_rtol/--bundleio_atol`` for bundled
programs (``.bpte``) when built with bundled IO. It logs through ExecuTorch's PAL on stderr
(``I 00:00:00.012345 executorch:executor_runner.cpp:431] Model loaded in 12.3 ms.``): recent builds
log the load time and each execution's time, older ones only the total of all executions.

A binary with ``--server_mode`` (ExecuTorch 1.4.1 and later) loads each program once and executes it once
per line read on stdin: it re-reads its ``--inputs`` files, runs, rewrites its ``--output_file`` outputs
and logs ``SERVER MODE DONE``. Each program of a bundle then gets one live process (``NativeServer``),
and an action chunk is timed end to end through them, file hand-over included, as the Python runtime's
chunk includes its numpy hand-over. An older binary runs one process per call; its latency is taken
from its own logged execution times, never from the wall clock of processes: each call of a timed chunk
is one process with ``--num_executions`` of the warm-ups and one timed execution, whose outputs it writes
(``execution_ms``). Either way every timed chunk's outputs are checked, and the result says how the
chunk was timed.

Failures are classified (``coverfarm.device_result.DeviceFailure``): a process that ends before its program
is loaded was refused at load, one that ends after was a crash (its signal and last lines), and one
that runs past its bound is out of time; the runtime's own message is kept in full.

Its modules, bottom first: the binary's log (``log``), the failure classes read from a process's end and
output (``failures``), the binary and what it offers (``binary``), its command line (``command``), the
tensors as ``.bin`` files (``tensor_io``), the shader disk cache before a first load (``shader_cache``),
the live server-mode process (``server``), timing one process per call (``timing``), and the runtime
that runs a bundle's programs through them (``runtime``). Like all of ``gpu_runner`` it imports
``coverfarm`` and never torch.
"""
