"""Type stubs and docstrings: help() and IDEs see the whole API."""

import ast
import inspect
import os
import pydoc

import shmsem

PACKAGE = os.path.dirname(shmsem.__file__)


def stub_classes():
    tree = ast.parse(open(os.path.join(PACKAGE, "__init__.pyi")).read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name for n in node.body
                              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            out[node.name] |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        elif isinstance(node, ast.FunctionDef):
            out[node.name] = None
    return out


def public(obj):
    return {n for n in dir(obj) if not n.startswith("_")} | (
        {n for n in ("__enter__", "__exit__", "__await__", "__aenter__", "__aexit__")
         if hasattr(obj, n)})


def test_stubs_cover_every_public_name():
    stubs = stub_classes()
    assert set(shmsem.__all__) <= set(stubs), set(shmsem.__all__) - set(stubs)
    for name in ("Semaphore", "Permit", "CancelToken", "AcquireAsync"):
        cls = getattr(shmsem, name)
        missing = public(cls) - stubs[name]
        assert not missing, f"{name}: {missing} missing from __init__.pyi"
        extra = stubs[name] - public(cls) - {"__init__"}
        assert not extra, f"{name}: {extra} in __init__.pyi but not at run time"
    assert os.path.exists(os.path.join(PACKAGE, "py.typed"))


def test_docstrings_for_help():
    text = pydoc.render_doc(shmsem.Semaphore, renderer=pydoc.plaintext)
    for word in ("fleet-wide", "acquire", "FIFO", "timeout", "try_acquire", "acquire_async"):
        assert word in text, word
    for obj in (shmsem, shmsem.Semaphore, shmsem.Permit, shmsem.Semaphore.acquire,
                shmsem.Semaphore.try_acquire, shmsem.Semaphore.acquire_async,
                shmsem.Permit.release, shmsem.Permit.extend, shmsem.bounded,
                shmsem.AcquisitionError, shmsem.Holder, shmsem.Stats):
        assert inspect.getdoc(obj), obj
    assert "ttl" in inspect.getdoc(shmsem.Semaphore.acquire)
