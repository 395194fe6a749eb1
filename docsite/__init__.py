"""Tooling for the documentation site (mkdocs.yml, docs/): pages generated from the
code and from the benchmarks' figures. Run through bin/docs; not part of the service."""
