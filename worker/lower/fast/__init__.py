"""Fast lowering (docs/lowering.md): the exact fast partitioner, its switch (``switch``), the levers and
the upstream code each was written against (``levers``), and the per-partition work fast skips."""
