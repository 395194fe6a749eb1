"""Reads for the operator dashboard's session pages, one module per topic."""
