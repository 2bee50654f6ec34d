"""Generate a graph module's Python code when it is first needed, not each time a pass rebuilds it.

``GraphModule.__init__`` and every ``recompile()`` generate the module's whole Python source and
compile it into ``forward``. During ``to_backend`` and ``to_executorch`` this happens for every module
an ExecuTorch pass creates or edits: each of ``VulkanBackend.preprocess``'s passes rebuilds the
partition's module, once per partition, and each whole-program pass of ``to_executorch`` rebuilds the
program's. On tdmpc (140 Vulkan partitions) that is about 12,000 code generations in ``preprocess``
alone, and almost none of those modules is ever run: passes read and rewrite the graph, and re-trace
it through ``torch.fx.Interpreter``, which does not use the generated code.

torch has the lazy variant for the same reason (``torch.fx._lazy_graph_module._LazyGraphModule``, used
by Inductor's pattern matcher): ``recompile()`` only marks the module, and the code is generated on
the first call of ``forward``, read of ``.code``, ``str()`` or pickling. Within the block, graph modules
that ExecuTorch builds as plain ``torch.fx.GraphModule(...)`` are built as a subclass of it that differs
in three ways, each to match the eager module where something looks without generating code:
any read of ``forward`` generates the code, not only a call (``ExportedProgram.module()`` reads the
signature of ``forward`` to name its guards); ``recompile()`` updates the pytree input and output specs
at once (exported programs read them); and it marks the module's graph-module children too, as the
eager one recompiles them. The graphs, node names and ``.pte`` bytes are the same
(tests/worker/lower/fast/test_lazy_recompile.py).

Scoped to ``EdgeProgramManager.to_backend`` and ``to_executorch`` (``lazy_code_in_backend_and_emit``).
Lazy modules in ``to_edge`` too gained nothing measurable on tdmpc (169 s of lowering against 166 s), so
``to_edge`` keeps upstream's eager ones.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from executorch.exir.program._program import EdgeProgramManager
from torch.fx import GraphModule
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.graph import _PyTreeCodeGen

from worker.lower.fast.patching import replaced_attributes, within

__all__ = ["lazy_code_in_backend_and_emit", "lazy_graph_module_code"]


class _CodeOnFirstUse:
    """The ``forward`` of a graph module whose code is not generated yet. Any read of ``forward``
    through the module (a call, ``inspect.signature(module.forward)``) generates the code first, which
    replaces this descriptor with the compiled ``forward``; read through the class, it is itself."""

    def __get__(self, module: GraphModule | None, owner: type) -> Any:
        if module is None:
            return self
        GraphModule.recompile(module)
        return type(module).forward.__get__(module, owner)


class _LazyCodeGraphModule(_LazyGraphModule):
    """torch's lazy graph module, where anything that reads ``forward`` (not only a call) gets the
    generated code, and whose ``recompile()`` refreshes the pytree specs and marks its graph-module
    children at once, as ``GraphModule.recompile`` regenerates them."""

    forward = _CodeOnFirstUse()

    @classmethod
    def _needs_recompile(cls) -> bool:
        return isinstance(cls.forward, _CodeOnFirstUse)

    def recompile(self) -> None:  # type: ignore[override]  # upstream's lazy recompile returns None
        codegen = self._graph._codegen
        if isinstance(codegen, _PyTreeCodeGen):
            self._in_spec = codegen.pytree_info.in_spec
            self._out_spec = codegen.pytree_info.out_spec
        type(self).forward = _LazyCodeGraphModule.forward
        for child in self.children():
            if isinstance(child, GraphModule):
                child.recompile()


_STOCK_NEW = vars(GraphModule)["__new__"]


def _new_graph_module(cls: type[GraphModule], *args: Any, **kwargs: Any) -> GraphModule:
    """``GraphModule.__new__``, building the lazy class where plain ``GraphModule`` is asked for."""
    lazy = _LazyCodeGraphModule if cls is GraphModule else cls
    return _STOCK_NEW.__func__(lazy, *args, **kwargs)


def lazy_graph_module_code() -> AbstractContextManager[None]:
    """Within the block, ``torch.fx.GraphModule(...)`` builds a module whose code is generated on first
    use; restored on exit (modules built inside stay lazy, and correct, afterwards). Nestable;
    process-global and not thread-safe."""
    return replaced_attributes(GraphModule, __new__=staticmethod(_new_graph_module))


def lazy_code_in_backend_and_emit() -> AbstractContextManager[None]:
    """Within the block, ``EdgeProgramManager.to_backend`` and ``to_executorch`` build lazy graph
    modules; restored on exit."""
    return replaced_attributes(
        EdgeProgramManager,
        to_backend=within(EdgeProgramManager.to_backend, lazy_graph_module_code),
        to_executorch=within(EdgeProgramManager.to_executorch, lazy_graph_module_code),
    )
