"""The provider APIs the proxy speaks, one object each (``base.Dialect``), and their registry."""

from .anthropic import ANTHROPIC
from .base import Dialect, all_registered, error_type, registered, relayed_headers, serving
from .gemini import GEMINI
from .openai_chat import OPENAI
from .responses import RESPONSES

__all__ = [
    "ANTHROPIC",
    "GEMINI",
    "OPENAI",
    "RESPONSES",
    "Dialect",
    "all_registered",
    "error_type",
    "registered",
    "relayed_headers",
    "serving",
]
