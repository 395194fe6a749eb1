"""schemathesis hooks for tests/test_contract_fuzz.py (loaded through SCHEMATHESIS_HOOKS).

A fuzzed session id is almost never a real one, so every call would stop at
the 404 and the handlers behind it would go untested. Most generated path ids
are swapped for real ones the test created (CONTEXTSVC_FUZZ_IDS, JSON: path
parameter name -> ids); one in five keeps the fuzzed value, so the 404/422
paths of odd ids are fuzzed too. The choice is a hash of the generated value:
the same seed gives the same run.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import schemathesis

IDS: dict[str, list[str]] = json.loads(os.environ.get("CONTEXTSVC_FUZZ_IDS") or "{}")


@schemathesis.hook
def map_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
    if not path_parameters:
        return path_parameters
    for name, value in list(path_parameters.items()):
        real = IDS.get(name)
        pick = zlib.crc32(repr(value).encode())
        if real and pick % 5:
            path_parameters[name] = real[pick % len(real)]
    return path_parameters
