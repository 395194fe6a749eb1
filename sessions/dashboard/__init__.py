"""The operator dashboard's session pages: server-rendered pages and htmx partials.

``views.py`` stays thin (parse → selector or service → render); the reads
are in ``selectors/`` by topic; ``charts.py`` turns selector data into SVG
geometry; ``forms.py`` parses input; ``http.py`` is the plumbing the other
apps' dashboard views share (operator access, the htmx request type).
"""
