"""The UOp IR: immutable hash-consed nodes, the op vocabulary, pattern rewriting and simplification."""

from svod.ir.ops import AxisKind, Ops
from svod.ir.pattern import PatternMatcher, UPat, graph_rewrite, rename_variables, replacements_of, substitute
from svod.ir.symbolic import simplify, symbolic
from svod.ir.uop import UOp, kernel_label

__all__ = ["AxisKind", "Ops", "PatternMatcher", "UOp", "UPat", "graph_rewrite", "kernel_label", "simplify",
           "rename_variables", "replacements_of", "substitute", "symbolic"]
