"""The context engine: pure Python, no Django, no I/O.

Every formula of the specs lives here once; the Django apps convert their rows
into the dataclasses of ``messages`` and call in.
"""
