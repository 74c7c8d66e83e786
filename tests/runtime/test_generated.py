"""Functions generated from a source and a namespace (``svod.runtime.generated``): each reads its own namespace,
sources alike compile once, and the kept sources are bounded."""

from __future__ import annotations

from svod.runtime import generated


def test_functions_of_one_source_read_their_own_namespaces_and_compile_once(monkeypatch):
    compiled: list[str] = []
    real = compile

    def counted(source, *args, **keywords):  # type: ignore[no-untyped-def]
        compiled.append(source)
        return real(source, *args, **keywords)

    monkeypatch.setattr(generated, "compile", counted, raising=False)
    monkeypatch.setattr(generated, "_codes", {})
    body = ["if x < LOW:", "    return None", "return x * SCALE"]
    doubled = generated.function("f", ("x",), body, {"LOW": 0, "SCALE": 2})
    negated = generated.function("f", ("x",), body, {"LOW": -5, "SCALE": -1})
    assert [doubled(v) for v in (-1, 0, 3)] == [None, 0, 6]
    assert [negated(v) for v in (-6, -5, 4)] == [None, 5, -4]
    assert len(compiled) == 1


def test_the_sources_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(generated, "_codes", {})
    for k in range(generated.CODES_KEPT + 3):
        assert generated.function("g", (), [f"return {k}"], {})() == k
    assert 0 < len(generated._codes) <= generated.CODES_KEPT
