# The compiled module; its public names are re-exported (and typed) by
# shmsem/__init__.pyi.
from typing import Any

def __getattr__(name: str) -> Any: ...
