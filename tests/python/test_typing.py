"""Type stubs and docstrings: help() and IDEs see the whole API."""

import ast
import inspect
import os
import pydoc
import re

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


DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "python.md")


def test_help_and_python_md_give_the_signal_tick_of_the_code():
    tick_ms = round(shmsem._shmsem._signal_tick * 1000)
    helped = re.search(r"within about (\d+) ms", inspect.getdoc(shmsem.Semaphore.acquire))
    documented = re.search(r"within about (\d+) ms", open(DOCS).read())
    assert helped and documented
    assert int(helped.group(1)) == int(documented.group(1)) == tick_ms


def test_python_md_constructor_signature_names_every_parameter():
    tree = ast.parse(open(os.path.join(PACKAGE, "__init__.pyi")).read())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Semaphore"]
    (init,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    names = [a.arg for a in init.args.args[1:] + init.args.kwonlyargs]
    text = open(DOCS).read()
    start = text.index("shmsem.Semaphore(key, permits")
    signature = text[start:text.index("```", start)]
    for name in names:
        assert re.search(r"\b%s\b" % name, signature), f"{name} missing from python.md's signature"
