"""Recall over the whole session: the index (``index``), the search (``search``) and the tool (``tool``)."""
