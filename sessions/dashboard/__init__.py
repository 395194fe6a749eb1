"""The operator dashboard: server-rendered pages and htmx partials (issue 5).

``views.py`` stays thin (parse → selector or service → render);
``charts.py`` turns selector data into SVG geometry; ``forms.py`` parses input.
"""
