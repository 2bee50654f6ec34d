"""What blocks the rest: a sweep's blocker groups per (backend, op, reason) across its policies, and
what-if estimates per policy, per group and per reason.

Pure functions over stored result documents (no database, no torch). A group's cost in a policy is the
heavy math it keeps on the CPU as a share of that policy's weighted multiply-adds; groups are sorted by
heavy math lost (the largest such share, then multiply-adds, then nodes), as the tracker sorts its rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from coverfarm.result import Blocker, ResultDocument
from orchestrator.reports.schemas import BlockerGroup, BlockerHit, BlockersReport, ReasonWhatIf, ReproView

READY = "ready"
NOT_REPRODUCED = "not reproduced"
NO_REPRO = "no repro"


def _share(part: int | None, whole: int | None) -> float | None:
    if part is None or not whole:
        return None
    return part / whole


def _if_supported(doc: ResultDocument, nodes: int, macs: int) -> tuple[int | None, float | None]:
    """(ops on the backend, heavy-math share on the backend) if these nodes were taken too."""
    ops = None if doc.ops.on_backend is None else min(doc.ops.on_backend + nodes, doc.ops.total or 0)
    on_backend = doc.heavy_macs.on_backend
    heavy = (
        None
        if on_backend is None
        else _share(min(on_backend + macs, doc.heavy_macs.total or 0), doc.heavy_macs.total)
    )
    return ops, heavy


def _hit(doc: ResultDocument, blocker: Blocker) -> BlockerHit:
    ops_if, heavy_if = _if_supported(doc, blocker.count, blocker.macs)
    extra = None
    if doc.programs.count is not None and blocker.programs_if_supported is not None:
        extra = doc.programs.count - blocker.programs_if_supported
    return BlockerHit(
        policy=doc.policy,
        nodes=blocker.count,
        macs=blocker.macs,
        macs_share=_share(blocker.macs, doc.heavy_macs.total),
        extra_programs=extra,
        ops_total=doc.ops.total,
        ops_on_backend=doc.ops.on_backend,
        ops_if_supported=ops_if,
        heavy_share=_share(doc.heavy_macs.on_backend, doc.heavy_macs.total),
        heavy_share_if_supported=heavy_if,
        repro_status=_status(blocker),
    )


def _status(blocker: Blocker) -> str:
    if blocker.repro is None:
        return NO_REPRO
    return READY if blocker.repro.reproduced else NOT_REPRODUCED


def _repro_view(policy: str, blocker: Blocker) -> ReproView:
    repro = blocker.repro
    return ReproView(
        policy=policy,
        status=_status(blocker),
        text=repro.text if repro else None,
        output=repro.output if repro else None,
        reason_seen=repro.reason_seen if repro else None,
        error=repro.error if repro else None,
        note=blocker.repro_note,
    )


def _sort_key(group: BlockerGroup) -> tuple[float, int, int, str, str, str]:
    top_share = max((hit.macs_share or 0.0 for hit in group.policies), default=0.0)
    return (-top_share, -group.macs, -group.nodes, group.backend, group.op, group.reason)


def blocker_groups(docs: Iterable[ResultDocument]) -> list[BlockerGroup]:
    """Every (backend, op, reason) group over the documents, with its hits per policy, sorted by heavy
    math lost. A group's repro is the first ready one among its policies, else the first there is."""
    hits: dict[tuple[str, str, str], list[tuple[ResultDocument, Blocker]]] = defaultdict(list)
    for doc in docs:
        for blocker in doc.blockers:
            hits[(doc.backend, blocker.op, blocker.reason)].append((doc, blocker))
    groups = []
    for (backend, op, reason), found in hits.items():
        found.sort(
            key=lambda pair: (-(_share(pair[1].macs, pair[0].heavy_macs.total) or 0.0), pair[0].policy)
        )
        policies = [_hit(doc, blocker) for doc, blocker in found]
        extras = [hit.extra_programs for hit in policies if hit.extra_programs is not None]
        with_repro = [(doc.policy, b) for doc, b in found if b.repro is not None]
        chosen = next(((p, b) for p, b in with_repro if b.repro_ready), with_repro[0] if with_repro else None)
        groups.append(
            BlockerGroup(
                backend=backend,
                op=op,
                reason=reason,
                nodes=sum(hit.nodes for hit in policies),
                macs=sum(hit.macs for hit in policies),
                extra_programs=sum(extras) if extras else None,
                repro_status=_status(chosen[1]) if chosen else NO_REPRO,
                repro=_repro_view(*chosen) if chosen else _repro_view(found[0][0].policy, found[0][1]),
                policies=policies,
            )
        )
    return sorted(groups, key=_sort_key)


def reason_what_ifs(docs: Iterable[ResultDocument]) -> list[ReasonWhatIf]:
    """Per backend, reason and policy: the ops and heavy math the backend would take if every group of
    that reason were supported (e.g. "dtype not supported": bf16 everywhere). Sorted by heavy math
    regained, then ops regained."""
    rows = []
    for doc in docs:
        by_reason: dict[str, list[Blocker]] = defaultdict(list)
        for blocker in doc.blockers:
            by_reason[blocker.reason].append(blocker)
        for reason, blockers in by_reason.items():
            nodes, macs = sum(b.count for b in blockers), sum(b.macs for b in blockers)
            ops_if, heavy_if = _if_supported(doc, nodes, macs)
            rows.append(
                ReasonWhatIf(
                    backend=doc.backend,
                    reason=reason,
                    policy=doc.policy,
                    ops=sorted(b.op for b in blockers),
                    nodes=nodes,
                    macs=macs,
                    ops_total=doc.ops.total,
                    ops_on_backend=doc.ops.on_backend,
                    ops_if_supported=ops_if,
                    heavy_share=_share(doc.heavy_macs.on_backend, doc.heavy_macs.total),
                    heavy_share_if_supported=heavy_if,
                )
            )
    return sorted(
        rows,
        key=lambda r: (
            -((r.heavy_share_if_supported or 0.0) - (r.heavy_share or 0.0)),
            -r.nodes,
            r.backend,
            r.reason,
            r.policy,
        ),
    )


def blockers_report(sweep_id: int, docs: list[ResultDocument], backend: str | None = None) -> BlockersReport:
    chosen = [doc for doc in docs if backend is None or doc.backend == backend]
    return BlockersReport(
        sweep_id=sweep_id,
        backend=backend,
        policies=sorted({doc.policy for doc in chosen}),
        groups=blocker_groups(chosen),
        by_reason=reason_what_ifs(chosen),
    )
