"""The plan steps of the ``np.linalg`` factorisations of a matrix of any shape and of the symmetric
eigenproblem, symmetric and general (``qr``, ``svd``, ``pinv``, ``eigh``, ``eigvalsh``, ``eig``, ``eigvals``): each
result a new array the plan makes, then the steps of ``svod.frontend.linalg_qr``, ``linalg_svd``, ``linalg_eigen``
or ``linalg_general``."""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from svod.frontend import linalg, linalg_eigen, linalg_general, linalg_qr, linalg_svd
from svod.frontend.phases import Factoring as Statement

KINDS = ("qr", "svd", "pinv", "eigh", "eigvalsh", "eig", "eigvals")
"""The functions whose steps ``add`` adds."""


def add(builder: Any, item: Statement, factoring: linalg.Factoring, shape: tuple[int, int]) -> list[int]:
    """The steps of ``item`` (of a function of ``KINDS``) of the matrix ``factoring.source`` of ``shape``, its
    results new arrays of the plan ``builder`` (a ``jit_plans.Builder``) builds."""
    dtype = factoring.dtype

    def made(name: str, part: tuple[int, ...], dtype: np.dtype) -> int:
        return int(builder.array_made(name, item.statement, part, dtype))

    if item.kind == "qr":
        return linalg_qr.add_qr(factoring, shape, *(made(name, part, dtype) for name, part in
                                                    zip(item.targets, linalg_qr.qr_shapes(shape), strict=True)))
    if item.kind == "pinv":
        return linalg_svd.add_pinv(factoring, shape, made(item.targets[0], shape[::-1], dtype))
    if item.kind == "svd":
        call = item.statement.value
        full = isinstance(call, ast.Call) and linalg.keywords(call).get("full_matrices", True) is True
        u, s, vh = linalg_svd.svd_shapes(shape, full)
        buffers = [made(name, part, dtype) for name, part in
                   zip(item.targets, (u, s, vh) if len(item.targets) == 3 else (s,), strict=True)]
        return linalg_svd.add_svd(factoring, shape, buffers[len(buffers) // 2],
                                  (buffers[0], buffers[2]) if len(buffers) == 3 else None, full)
    general = item.kind in ("eig", "eigvals")
    out_dtype = linalg_general.result_dtype(dtype) if general else dtype
    buffers = [made(name, part, out_dtype) for name, part in zip(item.targets, (shape[:1], shape), strict=False)]
    vectors = buffers[1] if len(buffers) > 1 else None
    if general:
        return linalg_general.add_eig(factoring, buffers[0], vectors)
    return linalg_eigen.add_eigh(factoring, buffers[0], vectors)
